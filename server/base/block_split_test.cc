#include "server/base/block_split.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace starling {
namespace {

TEST(BlockSplit, FirstCountModPartsBlocksHoldOneMore) {
  const uint64_t expected[] = {0, 3, 6, 8, 10};
  for (int i = 0; i <= 4; ++i) {
    EXPECT_EQ(BlockBegin(10, 4, i), expected[i]) << "block " << i;
  }
}

TEST(BlockSplit, CoversEveryCountAndFindsEveryElementsBlock) {
  for (int parts : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 24, 32}) {
    for (uint64_t count : {0ull, 1ull, 2ull, 7ull, 31ull, 1000ull, 1003ull}) {
      uint64_t smallest = count;
      uint64_t largest = 0;
      EXPECT_EQ(BlockBegin(count, parts, 0), 0u);
      EXPECT_EQ(BlockBegin(count, parts, parts), count);
      for (int i = 0; i < parts; ++i) {
        const uint64_t begin = BlockBegin(count, parts, i);
        const uint64_t end = BlockBegin(count, parts, i + 1);
        ASSERT_LE(begin, end);
        smallest = std::min(smallest, end - begin);
        largest = std::max(largest, end - begin);
        for (uint64_t e = begin; e < end; ++e) {
          ASSERT_EQ(BlockContaining(count, parts, e), i)
              << "element " << e << " count " << count << " parts " << parts;
        }
      }
      EXPECT_LE(largest - smallest, 1u) << count << " / " << parts;
    }
  }
}

}  // namespace
}  // namespace starling
