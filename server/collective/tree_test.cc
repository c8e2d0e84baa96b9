// Runs the tree collectives over the loopback transport across the grid
// of group sizes, lengths, dtypes and ops, against the fp64 reference (see
// collective_test_util.h for the tolerance).
#include "server/collective/tree.h"

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"

namespace starling {
namespace collective {
namespace {

constexpr Algorithm kAlgorithm = Algorithm::kTree;

TEST(Tree, AllReduceMatchesReferenceOnEveryGridCase) {
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
  }
}

TEST(Tree, ReduceScatterLeavesEachRankItsReducedBlock) {
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    ASSERT_OK(CheckCollective(OpKind::kReduceScatter, kAlgorithm, c));
  }
}

TEST(Tree, AllGatherAssemblesEveryRanksBlock) {
  for (const GridCase& c : SmallGrid(/*all_types=*/true)) {
    if (c.op != ReduceOp::kSum) continue;
    ASSERT_OK(CheckCollective(OpKind::kAllGather, kAlgorithm, c));
  }
}

TEST(Tree, BroadcastCopiesTheRootsBuffer) {
  for (const GridCase& c : SmallGrid(/*all_types=*/false)) {
    ASSERT_OK(CheckCollective(OpKind::kBroadcast, kAlgorithm, c));
  }
}

TEST(Tree, AllReducesAMillionAndThreeFloatsWithDefaultChunks) {
  for (int size : {3, 4}) {
    GridCase c{size, 1000003, DataType::kFloat32, ReduceOp::kSum,
               ChunkPlanner::kDefaultChunkBytes};
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
  }
}

}  // namespace
}  // namespace collective
}  // namespace starling
