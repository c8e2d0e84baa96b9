#include "server/coordinator/shard_map.h"

#include "gtest/gtest.h"

namespace starling {
namespace coordinator {
namespace {

TEST(ShardMap, FirstCountModNRanksGetOneExtraElement) {
  const std::vector<proto::ShardRange> map = ComputeShardMap(10, 4);
  ASSERT_EQ(map.size(), 4u);
  const uint64_t expected[][2] = {{0, 3}, {3, 6}, {6, 8}, {8, 10}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(map[r].rank(), r);
    EXPECT_EQ(map[r].begin_element(), expected[r][0]) << "rank " << r;
    EXPECT_EQ(map[r].end_element(), expected[r][1]) << "rank " << r;
  }
}

TEST(ShardMap, CoversEveryCountExactlyForEveryGroupSize) {
  for (int ranks : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 24, 32}) {
    for (uint64_t count : {0ull, 1ull, 2ull, 7ull, 31ull, 1000003ull}) {
      const std::vector<proto::ShardRange> map = ComputeShardMap(count, ranks);
      ASSERT_EQ(map.size(), static_cast<size_t>(ranks));
      uint64_t next = 0;
      uint64_t smallest = count;
      uint64_t largest = 0;
      for (const proto::ShardRange& range : map) {
        EXPECT_EQ(range.begin_element(), next);
        EXPECT_GE(range.end_element(), range.begin_element());
        const uint64_t size = range.end_element() - range.begin_element();
        smallest = std::min(smallest, size);
        largest = std::max(largest, size);
        next = range.end_element();
      }
      EXPECT_EQ(next, count) << "count " << count << " ranks " << ranks;
      EXPECT_LE(largest - smallest, 1u);
    }
  }
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
