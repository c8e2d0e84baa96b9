// The collective grid over the write paths under the TCP transport: the
// fabric (libfabric's tcp provider on 127.0.0.1) as the provider reports
// its rules and as verbs requires them, and shared-memory rings: every
// algorithm and op on group sizes 1 to 11 and odd lengths, every dtype.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/transport/fabric/fabric_test_util.h"

namespace starling {
namespace collective {
namespace {

using transport::fabric::CreatePathGroup;
using transport::fabric::FabricGroup;
using transport::fabric::PathKind;

class CollectiveOverFabric : public ::testing::TestWithParam<PathKind> {};

TEST_P(CollectiveOverFabric, EveryAlgorithmAndOpMatchesTheReference) {
  for (int size : {1, 2, 3, 4, 5, 8, 11}) {
    ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(size, GetParam()));
    ASSERT_OK(CheckGridOnTransports(group.Raw())) << size << " ranks";
  }
}

TEST_P(CollectiveOverFabric, AllReducesAMillionAndThreeFloatsOnFourRanks) {
  ASSERT_OK_AND_ASSIGN(FabricGroup group, CreatePathGroup(4, GetParam()));
  for (Algorithm algorithm :
       {Algorithm::kButterfly, Algorithm::kRing, Algorithm::kReduceBroadcast}) {
    GridCase c{4, 1000003, DataType::kFloat32, ReduceOp::kSum,
               ChunkPlanner::kDefaultChunkBytes};
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, algorithm, c, group.Raw()));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPath, CollectiveOverFabric,
                         ::testing::Values(PathKind::kAsReported,
                                           PathKind::kVerbsStyle,
                                           PathKind::kShm,
                                           PathKind::kShmRingsOnly),
                         [](const auto& info) {
                           return transport::fabric::PathKindName(info.param);
                         });

}  // namespace
}  // namespace collective
}  // namespace starling
