// Ring-specific cases against the fp64 reference (see collective_test_util.h
// for the tolerance). The grid shared by every algorithm is in
// algorithm_grid_test.cc.
#include "server/collective/ring.h"

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"

namespace starling {
namespace collective {
namespace {

constexpr Algorithm kAlgorithm = Algorithm::kRing;

TEST(Ring, PipelinesManyChunksPerStep) {
  // 3 elements per chunk: every block is cut into many chunks that are
  // forwarded one by one.
  GridCase c{5, 10007, DataType::kFloat32, ReduceOp::kSum, 12};
  ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
}

}  // namespace
}  // namespace collective
}  // namespace starling
