// GoogleTest matchers for absl::Status and absl::StatusOr<T> (testonly).
//
//   EXPECT_THAT(DoThing(), IsOk());
//   EXPECT_THAT(Parse(frame), StatusIs(absl::StatusCode::kDataLoss));
//   EXPECT_THAT(Connect(), StatusIs(absl::StatusCode::kUnavailable,
//                                   HasSubstr("rank 3")));
//   ASSERT_OK_AND_ASSIGN(auto value, ComputeStatusOr());
#ifndef STARLING_SERVER_BASE_STATUS_MATCHERS_H_
#define STARLING_SERVER_BASE_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace internal_status {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches an absl::Status or absl::StatusOr<T> whose status is OK.
class IsOkMatcher {
 public:
  template <typename StatusLike>
  bool MatchAndExplain(const StatusLike& value,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    if (!status.ok()) *listener << "whose status is " << status;
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

// Matches a status with the given code and a message matching `message`.
class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code,
                  ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename StatusLike>
  bool MatchAndExplain(const StatusLike& value,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(value);
    *listener << "whose status is " << status;
    if (status.code() != code_) return false;
    return message_.MatchAndExplain(std::string(status.message()), listener);
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has code " << absl::StatusCodeToString(code_)
        << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

}  // namespace internal_status

inline ::testing::PolymorphicMatcher<internal_status::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(internal_status::IsOkMatcher());
}

inline ::testing::PolymorphicMatcher<internal_status::StatusIsMatcher> StatusIs(
    absl::StatusCode code,
    ::testing::Matcher<const std::string&> message = ::testing::_) {
  return ::testing::MakePolymorphicMatcher(
      internal_status::StatusIsMatcher(code, std::move(message)));
}

}  // namespace starling

#define STARLING_MATCHERS_CONCAT_INNER_(a, b) a##b
#define STARLING_MATCHERS_CONCAT_(a, b) STARLING_MATCHERS_CONCAT_INNER_(a, b)

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(           \
      STARLING_MATCHERS_CONCAT_(starling_statusor_, __LINE__), lhs, expr)

#define ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  ASSERT_TRUE(statusor.ok()) << statusor.status();      \
  lhs = std::move(statusor).value()

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::starling::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::starling::IsOk())

#endif  // STARLING_SERVER_BASE_STATUS_MATCHERS_H_
