// Runs every collective of every algorithm (butterfly, ring, tree,
// reduce-broadcast) over the loopback transport across the grid of group
// sizes, lengths, dtypes and ops, against the fp64 reference (see
// collective_test_util.h for the tolerance). Algorithm-specific cases stay in
// <algorithm>_test.cc.
#include <string>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/chunk_planner.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {
namespace {

class AlgorithmGrid : public ::testing::TestWithParam<Algorithm> {};

TEST_P(AlgorithmGrid, AllReduceMatchesReferenceOnEveryGridCase) {
  // Every grid length is below doubling_max_bytes: the butterfly runs
  // recursive doubling here (butterfly_test.cc covers halving).
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, GetParam(), c));
  }
}

TEST_P(AlgorithmGrid, ReduceScatterLeavesEachRankItsReducedBlock) {
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    ASSERT_OK(CheckCollective(OpKind::kReduceScatter, GetParam(), c));
  }
}

TEST_P(AlgorithmGrid, AllGatherAssemblesEveryRanksBlock) {
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    if (c.op != ReduceOp::kSum) continue;
    ASSERT_OK(CheckCollective(OpKind::kAllGather, GetParam(), c));
  }
}

TEST_P(AlgorithmGrid, BroadcastCopiesTheRootsBuffer) {
  for (const GridCase& c : SmallGrid(/*all_types=*/false)) {
    ASSERT_OK(CheckCollective(OpKind::kBroadcast, GetParam(), c));
  }
}

TEST_P(AlgorithmGrid, AllReducesAMillionAndThreeFloatsWithDefaultChunks) {
  for (int size : {3, 4}) {
    GridCase c{size, 1000003, DataType::kFloat32, ReduceOp::kSum,
               ChunkPlanner::kDefaultChunkBytes};
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, GetParam(), c));
  }
}

// "Butterfly", "Ring", "Tree", "ReduceBroadcast": test names read
// AllReduceMatchesReferenceOnEveryGridCase/Ring.
std::string TestName(const ::testing::TestParamInfo<Algorithm>& info) {
  switch (info.param) {
    case Algorithm::kButterfly:
      return "Butterfly";
    case Algorithm::kRing:
      return "Ring";
    case Algorithm::kTree:
      return "Tree";
    case Algorithm::kReduceBroadcast:
      return "ReduceBroadcast";
    case Algorithm::kAuto:
      break;
  }
  return "Auto";
}

INSTANTIATE_TEST_SUITE_P(EveryAlgorithm, AlgorithmGrid,
                         ::testing::Values(Algorithm::kButterfly,
                                           Algorithm::kRing, Algorithm::kTree,
                                           Algorithm::kReduceBroadcast),
                         TestName);

}  // namespace
}  // namespace collective
}  // namespace starling
