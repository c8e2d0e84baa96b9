#include "server/base/secure_random.h"

#include <cstdint>
#include <set>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

// Keys drawn one after another, as a group registering its regions draws
// them, never repeat, and every bit takes both values: a generator that
// returns a constant (as a faulty RDSEED does) or a narrow value fails.
TEST(SecureRandom, DrawsDoNotRepeatAndUseEveryBit) {
  std::set<uint64_t> seen;
  uint64_t ones = 0;
  uint64_t zeros = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_OK_AND_ASSIGN(const uint64_t value, SecureRandom64("a test key"));
    EXPECT_TRUE(seen.insert(value).second) << "draw " << i << " repeated";
    ones |= value;
    zeros |= ~value;
  }
  EXPECT_EQ(ones, ~uint64_t{0});
  EXPECT_EQ(zeros, ~uint64_t{0});
}

}  // namespace
}  // namespace starling
