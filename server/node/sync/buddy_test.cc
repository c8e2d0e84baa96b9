#include "server/node/sync/buddy.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace starling {
namespace node {
namespace {

TEST(BuddyDistance, NoBuddyInAGroupOfOne) {
  EXPECT_EQ(BuddyDistance({}), 0);
  EXPECT_EQ(BuddyDistance({"a"}), 0);
}

TEST(BuddyDistance, TheNextRankWhenEveryDaemonHasItsOwnHost) {
  EXPECT_EQ(BuddyDistance({"a", "b"}), 1);
  EXPECT_EQ(BuddyDistance({"a", "b", "c", "d", "e"}), 1);
}

TEST(BuddyDistance, OneHostKeepsTheNextRank) {
  EXPECT_EQ(BuddyDistance({"a", "a", "a"}), 1);
}

TEST(BuddyDistance, SkipsTheDaemonsOfTheSameHost) {
  // Two daemons per host, ranks numbered by host: the buddy is two ahead.
  const std::vector<std::string> hosts = {"a", "a", "b", "b", "c", "c"};
  const int d = BuddyDistance(hosts);
  EXPECT_EQ(d, 2);
  for (int r = 0; r < 6; ++r) EXPECT_NE(hosts[r], hosts[(r + d) % 6]);
  EXPECT_EQ(BuddyDistance({"a", "a", "a", "b", "b", "b"}), 3);
}

TEST(BuddyDistance, UnevenHostsFallBackToTheNextRank) {
  // No stride separates 3 daemons of host a from the 1 of host b.
  EXPECT_EQ(BuddyDistance({"a", "a", "a", "b"}), 1);
}

}  // namespace
}  // namespace node
}  // namespace starling
