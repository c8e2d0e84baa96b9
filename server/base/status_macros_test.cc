#include "server/base/status_macros.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Status FailIf(bool fail, int* calls) {
  ++*calls;
  return fail ? absl::DataLossError("frame 7 is 12 bytes, region holds 8")
              : absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(bool fail, int value) {
  if (fail)
    return absl::UnavailableError("peer rank 2 (127.0.0.1:7002) closed");
  return std::make_unique<int>(value);
}

absl::Status Chain(bool fail, int* calls) {
  STARLING_RETURN_IF_ERROR(FailIf(fail, calls));
  ++*calls;
  return absl::OkStatus();
}

absl::StatusOr<int> Doubled(bool fail) {
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<int> v, MakeInt(fail, 21));
  return *v * 2;
}

TEST(StatusMacros, ReturnIfErrorPassesErrorUpAndEvaluatesOnce) {
  int calls = 0;
  EXPECT_THAT(Chain(true, &calls),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("frame 7")));
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacros, ReturnIfErrorContinuesOnOk) {
  int calls = 0;
  EXPECT_OK(Chain(false, &calls));
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacros, AssignOrReturnMovesValueOut) {
  ASSERT_OK_AND_ASSIGN(int v, Doubled(false));
  EXPECT_EQ(v, 42);
}

TEST(StatusMacros, AssignOrReturnPropagatesStatus) {
  EXPECT_THAT(Doubled(true), StatusIs(absl::StatusCode::kUnavailable,
                                      HasSubstr("rank 2 (127.0.0.1:7002)")));
}

TEST(Annotate, PrependsContextAndKeepsCodeAndPayload) {
  absl::Status s = absl::DeadlineExceededError("no answer from rank 3");
  s.SetPayload("starling/rank", absl::Cord("3"));
  absl::Status a = Annotate(s, "while all-reducing op 12 (butterfly step 1)");
  EXPECT_THAT(a, StatusIs(absl::StatusCode::kDeadlineExceeded,
                          "while all-reducing op 12 (butterfly step 1): no "
                          "answer from rank 3"));
  EXPECT_EQ(a.GetPayload("starling/rank").value(), absl::Cord("3"));
}

TEST(Annotate, LeavesOkAlone) {
  EXPECT_OK(Annotate(absl::OkStatus(), "while nothing"));
}

TEST(StatusMatchers, DescribeMismatches) {
  EXPECT_THAT(absl::InternalError("x"), Not(IsOk()));
  EXPECT_THAT(absl::InternalError("x"),
              Not(StatusIs(absl::StatusCode::kDataLoss)));
  EXPECT_THAT(absl::InternalError("abc"),
              Not(StatusIs(absl::StatusCode::kInternal, HasSubstr("zzz"))));
  absl::StatusOr<int> ok = 3;
  EXPECT_THAT(ok, IsOk());
  EXPECT_THAT(ok, Not(StatusIs(absl::StatusCode::kInternal)));
}

}  // namespace
}  // namespace starling
