#include "server/base/logging.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetMinLogSeverity(LogSeverity::kInfo);
    SetLogSinkForTesting([this](LogSeverity s, absl::string_view line) {
      severities_.push_back(s);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override {
    SetLogSinkForTesting(nullptr);
    SetMinLogSeverity(LogSeverity::kInfo);
  }

  std::vector<LogSeverity> severities_;
  std::vector<std::string> lines_;
};

TEST_F(LoggingTest, LineCarriesSeverityTimeThreadAndLocation) {
  STARLING_LOG(INFO) << "joined group as rank " << 3;
  ASSERT_THAT(lines_, SizeIs(1));
  // I20261122 20:49:18.123456 4711 logging_test.cc:NN] joined ...
  EXPECT_THAT(lines_[0],
              ContainsRegex("^I[0-9]{8} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} "
                            "[0-9]+ logging_test\\.cc:[0-9]+\\] joined group "
                            "as rank 3$"));
}

TEST_F(LoggingTest, DropsMessagesBelowMinimumSeverity) {
  SetMinLogSeverity(LogSeverity::kWarning);
  STARLING_LOG(DEBUG) << "hidden";
  STARLING_LOG(INFO) << "hidden";
  STARLING_LOG(WARNING) << "peer slow";
  STARLING_LOG(ERROR) << "peer lost";
  EXPECT_THAT(severities_,
              ElementsAre(LogSeverity::kWarning, LogSeverity::kError));
  EXPECT_THAT(lines_[1], HasSubstr("] peer lost"));
}

// What a peer sent reaches the log as one line that shows as it is: a
// newline cannot forge a log line of its own, an escape sequence cannot
// rewrite the operator's screen, a NUL shows; UTF-8 and tabs stay; a
// message of megabytes is cut, saying how much was left out.
TEST_F(LoggingTest, ControlBytesAreEscapedAndLinesBounded) {
  STARLING_LOG(WARNING) << "error from rank 2: "
                        << std::string(
                               "disk\nI20260101 00:00:00.0 1 x.cc:1] "
                               "forged\x1b[2J\0end\t\xc2\xb5s",
                               54);
  ASSERT_THAT(lines_, SizeIs(1));
  EXPECT_THAT(lines_[0],
              HasSubstr("error from rank 2: disk\\x0aI20260101 00:00:00.0 1 "
                        "x.cc:1] forged\\x1b[2J\\x00end\t\xc2\xb5s"));
  EXPECT_EQ(lines_[0].find('\n'), std::string::npos);
  STARLING_LOG(WARNING) << std::string(1 << 20, 'a');
  ASSERT_THAT(lines_, SizeIs(2));
  EXPECT_THAT(lines_[1], HasSubstr("... (983040 more bytes)"));
  EXPECT_LT(lines_[1].size(), 70u * 1024);
}

TEST_F(LoggingTest, DoesNotEvaluateDroppedMessages) {
  SetMinLogSeverity(LogSeverity::kError);
  int evaluated = 0;
  STARLING_LOG(INFO) << ++evaluated;
  EXPECT_EQ(evaluated, 0);
}

TEST(LogSeverity, ParsesNamesCaseInsensitively) {
  LogSeverity s = LogSeverity::kInfo;
  ASSERT_OK(ParseLogSeverity("warn", &s));
  EXPECT_EQ(s, LogSeverity::kWarning);
  ASSERT_OK(ParseLogSeverity("DEBUG", &s));
  EXPECT_EQ(s, LogSeverity::kDebug);
  EXPECT_THAT(ParseLogSeverity("loud", &s),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown log level 'loud'")));
}

TEST(LoggingDeathTest, CheckFailureAbortsWithCondition) {
  int peers = 0;
  EXPECT_DEATH(STARLING_CHECK(peers > 0) << "group has no peers",
               "check failed: peers > 0 group has no peers");
}

TEST(LoggingDeathTest, CheckOkAbortsWithStatus) {
  EXPECT_DEATH(STARLING_CHECK_OK(absl::InternalError("shard map corrupt")),
               "shard map corrupt");
}

}  // namespace
}  // namespace starling
