#include "server/collective/selector.h"

#include "gtest/gtest.h"

namespace starling {
namespace collective {
namespace {

TEST(Selector, SmallAllReduceUsesTheTree) {
  const SelectorOptions options;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 1024, 8),
            Algorithm::kTree);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 40000, 5),
            Algorithm::kTree);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce,
                            options.allreduce_tree_max_bytes, 8),
            Algorithm::kButterfly);
}

// Measured on 4 and 8 hosts (RESULTS.md run 10): the tree up to 40 KB, the
// butterfly from 48 to 128 KB, the ring from 160 KB.
TEST(Selector, MidSizedAllReduceUsesTheButterflyUpToTheRing) {
  const SelectorOptions options;
  for (int n : {4, 8}) {
    EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 48000, n),
              Algorithm::kButterfly);
    EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 128000, n),
              Algorithm::kButterfly);
    EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 160000, n),
              Algorithm::kRing);
  }
}

TEST(Selector, WithoutTheTreeSmallAllReduceUsesRecursiveDoubling) {
  SelectorOptions options;
  options.allreduce_tree_max_bytes = 0;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 1024, 8),
            Algorithm::kButterfly);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 1024, 5),
            Algorithm::kButterfly);
}

TEST(Selector, SmallBroadcastUsesTheTree) {
  const SelectorOptions options;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kBroadcast, 1024, 8),
            Algorithm::kTree);
}

TEST(Selector, LargeVectorsUseTheRingOnEveryGroupSize) {
  const SelectorOptions options;
  for (int n : {2, 4, 6, 8, 13}) {
    EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 64 << 20, n),
              Algorithm::kRing);
    EXPECT_EQ(SelectAlgorithm(options, OpKind::kReduceScatter, 1 << 20, n),
              Algorithm::kRing);
  }
}

TEST(Selector, MidSizedReduceScatterUsesTheButterfly) {
  const SelectorOptions options;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kReduceScatter, 100, 4),
            Algorithm::kButterfly);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllGather, 1000, 6),
            Algorithm::kButterfly);
}

TEST(Selector, ForcedAlgorithmWins) {
  const SelectorOptions options;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 1, 8,
                            Algorithm::kReduceBroadcast),
            Algorithm::kReduceBroadcast);
}

TEST(Selector, ThresholdsComeFromOptions) {
  SelectorOptions options;
  options.tree_max_bytes = 0;
  options.allreduce_tree_max_bytes = 0;
  options.doubling_max_bytes = 0;
  options.ring_min_bytes = 8;
  options.allreduce_ring_min_bytes = 8;
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 4, 8),
            Algorithm::kButterfly);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kAllReduce, 8, 8),
            Algorithm::kRing);
  EXPECT_EQ(SelectAlgorithm(options, OpKind::kBroadcast, 1, 8),
            Algorithm::kButterfly);
}

}  // namespace
}  // namespace collective
}  // namespace starling
