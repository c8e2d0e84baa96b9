#include "server/transport/retired_regions.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace starling {
namespace transport {
namespace {

TEST(RetiredRegions, HoldsHalfOpenRanges) {
  RetiredRegions retired;
  EXPECT_FALSE(retired.Contains(0));
  retired.Add(10, 20);
  EXPECT_FALSE(retired.Contains(9));
  EXPECT_TRUE(retired.Contains(10));
  EXPECT_TRUE(retired.Contains(19));
  EXPECT_FALSE(retired.Contains(20));
  retired.Add(30, 30);  // empty
  retired.Add(40, 35);  // empty
  EXPECT_FALSE(retired.Contains(30));
  EXPECT_FALSE(retired.Contains(36));
  EXPECT_EQ(retired.range_count(), 1u);
}

TEST(RetiredRegions, ExtendingARangeKeepsOneRange) {
  RetiredRegions retired;
  const uint64_t base = uint64_t{1} << 63;
  for (uint64_t seq = 1; seq <= 1000; ++seq) retired.Add(base, base + seq * 4);
  EXPECT_EQ(retired.range_count(), 1u);
  EXPECT_TRUE(retired.Contains(base + 3999));
  EXPECT_FALSE(retired.Contains(base + 4000));
  EXPECT_FALSE(retired.Contains(base - 1));
}

TEST(RetiredRegions, MergesOverlappingAndAdjacentRanges) {
  RetiredRegions retired;
  retired.Add(50, 60);
  retired.Add(10, 20);
  retired.Add(30, 40);
  EXPECT_EQ(retired.range_count(), 3u);
  retired.Add(20, 30);  // adjacent on both sides
  EXPECT_EQ(retired.range_count(), 2u);
  EXPECT_TRUE(retired.Contains(25));
  retired.Add(5, 55);  // swallows all but overlaps the last
  EXPECT_EQ(retired.range_count(), 1u);
  EXPECT_TRUE(retired.Contains(5));
  EXPECT_TRUE(retired.Contains(59));
  EXPECT_FALSE(retired.Contains(60));
  EXPECT_FALSE(retired.Contains(4));
  retired.Add(0, UINT64_MAX);
  EXPECT_TRUE(retired.Contains(UINT64_MAX - 1));
  EXPECT_FALSE(retired.Contains(UINT64_MAX));
}

}  // namespace
}  // namespace transport
}  // namespace starling
