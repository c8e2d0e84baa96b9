#include "server/collective/shard_layout.h"

#include "gtest/gtest.h"

namespace starling {
namespace collective {
namespace {

TEST(ShardLayout, FirstRemainderBlocksGetOneExtraElement) {
  const ShardLayout layout(10, 4);  // 3 3 2 2
  EXPECT_EQ(layout.Size(0), 3u);
  EXPECT_EQ(layout.Size(1), 3u);
  EXPECT_EQ(layout.Size(2), 2u);
  EXPECT_EQ(layout.Size(3), 2u);
  EXPECT_EQ(layout.Begin(2), 6u);
  EXPECT_EQ(layout.Begin(4), 10u);
  EXPECT_EQ(layout.MaxSize(), 3u);
}

TEST(ShardLayout, FewerElementsThanPartsLeavesEmptyBlocks) {
  const ShardLayout layout(2, 5);
  EXPECT_EQ(layout.Size(0), 1u);
  EXPECT_EQ(layout.Size(1), 1u);
  EXPECT_EQ(layout.Size(4), 0u);
  EXPECT_EQ(layout.Begin(5), 2u);
  const ShardLayout empty(0, 3);
  EXPECT_EQ(empty.MaxSize(), 0u);
  EXPECT_EQ(empty.End(2), 0u);
}

TEST(ShardLayout, BlocksTileTheRangeAndBlockOfInvertsThem) {
  for (size_t count : {0u, 1u, 7u, 97u, 1000u}) {
    for (int parts = 1; parts <= 17; ++parts) {
      const ShardLayout layout(count, parts);
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        ASSERT_EQ(layout.Begin(i), next);
        ASSERT_LE(layout.Size(i), layout.MaxSize());
        ASSERT_GE(layout.Size(i) + 1, layout.MaxSize());
        for (size_t e = layout.Begin(i); e < layout.End(i); ++e) {
          ASSERT_EQ(layout.BlockOf(e), i) << count << " " << parts << " " << e;
        }
        next = layout.End(i);
      }
      ASSERT_EQ(next, count);
    }
  }
}

}  // namespace
}  // namespace collective
}  // namespace starling
