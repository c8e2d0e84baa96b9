// Butterfly-specific cases: recursive halving on the grid, overlapped
// doubling steps, folding ranks beyond a power of two and scratch sizes,
// against the fp64 reference (see collective_test_util.h for the tolerance).
// The grid shared by every algorithm is in algorithm_grid_test.cc.
#include "server/collective/butterfly.h"

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"

namespace starling {
namespace collective {
namespace {

constexpr Algorithm kAlgorithm = Algorithm::kButterfly;

TEST(Butterfly, HalvingAllReduceMatchesReferenceOnEveryGridCase) {
  for (GridCase c : SmallGrid(/*all_types=*/true)) {
    c.doubling_max_bytes = 0;
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
  }
}

TEST(Butterfly, DoublingOverlapsStepsWithoutOverwritingSentSums) {
  // 16 ranks: 4 doubling steps, so both accumulators are reused while a
  // partner may still be reading; 24-byte chunks.
  for (int size : {2, 8, 16, 13}) {
    GridCase c{size, 4001, DataType::kFloat64, ReduceOp::kSum, 24};
    ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
  }
}

TEST(Butterfly, FoldsRanksBeyondPowerOfTwo) {
  // 5, 6, 7 ranks: 1-3 extras fold into ranks 0-2, with uneven blocks.
  for (int size : {5, 6, 7, 13}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      GridCase c{size, 1009, DataType::kFloat64, op, 64};
      ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
      ASSERT_OK(CheckCollective(OpKind::kReduceScatter, kAlgorithm, c));
      ASSERT_OK(CheckCollective(OpKind::kAllGather, kAlgorithm, c));
    }
  }
}

TEST(Butterfly, LargeAllReducesPipelineTheirSegments) {
  // About 4.5 MiB: 64 segments (the most) of the pipelined halving and
  // doubling, of uneven lengths, each cut into 64 KiB chunks; powers of two
  // and ranks that fold.
  for (int size : {2, 4, 6, 8, 13}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      GridCase c{size, 9 * 128 * 1024 + 7, DataType::kFloat32, op, 64 * 1024};
      ASSERT_OK(CheckCollective(OpKind::kAllReduce, kAlgorithm, c));
    }
  }
  // The scratch of 64 segments: the vector beyond the fold, but for each
  // segment's halving areas rounding up by an element per step.
  const size_t bytes = (9 * 128 * 1024 + 7) * 4;
  const size_t rounding = 64 * 3 * 4;
  EXPECT_LE(ButterflyScratchBytes(OpKind::kAllReduce, bytes / 4, 4, 8, 0),
            bytes + rounding);
  EXPECT_LE(ButterflyScratchBytes(OpKind::kAllReduce, bytes / 4, 4, 6, 0),
            2 * bytes + rounding);
}

TEST(Butterfly, ScratchNeedsNoMoreThanFoldPlusVector) {
  // Power of two: the halving areas sum to less than the vector.
  EXPECT_LE(ButterflyScratchBytes(OpKind::kAllReduce, 1000, 4, 8, 0), 4000u);
  // With extras: the fold area (the vector) plus the halving areas.
  EXPECT_LE(ButterflyScratchBytes(OpKind::kAllReduce, 1000, 4, 6, 0),
            2 * 4000u);
  EXPECT_EQ(ButterflyScratchBytes(OpKind::kAllGather, 1000, 4, 6, 0), 0u);
  // Recursive doubling: fold area, one receive area per step, two sums.
  EXPECT_EQ(ButterflyScratchBytes(OpKind::kAllReduce, 1000, 4, 8, 1 << 16),
            (3 + 2) * 4000u);
  EXPECT_EQ(ButterflyScratchBytes(OpKind::kAllReduce, 1000, 4, 6, 1 << 16),
            4000u + (2 + 2) * 4000u);
}

}  // namespace
}  // namespace collective
}  // namespace starling
