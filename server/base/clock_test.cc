#include "server/base/clock.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace starling {
namespace {

TEST(FakeClock, StandsStillUntilAdvanced) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Seconds(6));
  EXPECT_EQ(clock.Now() - start, absl::Seconds(6));
  clock.Advance(absl::ZeroDuration());
  EXPECT_EQ(clock.Now() - start, absl::Seconds(6));
}

TEST(FakeClock, StartsWhereTold) {
  const absl::Time start = absl::FromUnixSeconds(42);
  FakeClock clock(start);
  EXPECT_EQ(clock.Now(), start);
}

TEST(FakeClockDeathTest, RefusesToRunBackwards) {
  FakeClock clock;
  EXPECT_DEATH(clock.Advance(absl::Seconds(-1)), "cannot run backwards");
}

TEST(RealClock, FollowsTheSystemClock) {
  RealClock clock;
  const Clock& as_interface = clock;
  const absl::Time before = absl::Now();
  const absl::Time now = as_interface.Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
}

}  // namespace
}  // namespace starling
