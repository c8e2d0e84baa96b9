#include "server/transport/crc32c.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace starling {
namespace transport {
namespace {

TEST(Crc32c, MatchesStandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros.
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  const char text[] = "the butterfly halves and doubles";
  const size_t n = std::strlen(text);
  for (size_t split = 0; split <= n; ++split) {
    EXPECT_EQ(Crc32cExtend(Crc32c(text, split), text + split, n - split),
              Crc32c(text, n));
  }
}

}  // namespace
}  // namespace transport
}  // namespace starling
