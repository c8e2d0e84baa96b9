#include "server/base/printable.h"

#include <string>

#include "gtest/gtest.h"

namespace starling {
namespace {

TEST(BoundedPrintable, ControlBytesAndEscapesBecomeQuestionMarks) {
  EXPECT_EQ(BoundedPrintable("\x1b[2Jok\x07\n\x7f\xc3\xa9", 100),
            "?[2Jok?????");
  EXPECT_EQ(BoundedPrintable("plain text ~", 100), "plain text ~");
}

TEST(BoundedPrintable, LongTextIsCutAndSaysHowMuch) {
  EXPECT_EQ(BoundedPrintable(std::string(10, 'x'), 4),
            "xxxx... (6 more bytes)");
  EXPECT_EQ(BoundedPrintable("abcd", 4), "abcd");
}

}  // namespace
}  // namespace starling
