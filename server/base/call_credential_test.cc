// Per-call credentials: what a signed call proves, and every way a
// credential that proves nothing is refused (replayed, late, for another
// call, caller, job or role, under another secret, malformed).
#include "server/base/call_credential.h"

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

using ::starling::IsOk;
using ::starling::StatusIs;
using ::testing::HasSubstr;

constexpr absl::string_view kSecret = "0123456789abcdef-cluster";
constexpr absl::string_view kOther = "fedcba9876543210-another";

const CallIdentity kNode{"node-a", "10.0.0.1:29500"};

absl::Time Now() { return absl::FromUnixSeconds(1'800'000'000); }

std::string Sign(CallRole role, absl::string_view method, absl::Time at = Now(),
                 absl::string_view secret = kSecret,
                 const CallIdentity& caller = kNode,
                 absl::string_view scope = "job") {
  absl::StatusOr<std::string> credential =
      SignCall(secret, role, method, scope, caller, at);
  EXPECT_THAT(credential.status(), IsOk());
  return credential.value_or("");
}

absl::Status Check(CallVerifier& verifier, absl::string_view credential,
                   CallRole role = CallRole::kMember,
                   absl::string_view method = "Heartbeat",
                   const CallIdentity& caller = kNode,
                   absl::string_view scope = "job", absl::Time now = Now()) {
  const std::vector<absl::string_view> secrets = {kSecret};
  return verifier.Verify(secrets, role, method, scope, caller, credential, now);
}

// A call signed under the service's secret is taken once; the same
// credential seen again (a replay) is refused, and a fresh one is taken.
TEST(CallVerifierTest, TakesEachCredentialOnce) {
  CallVerifier verifier;
  const std::string first = Sign(CallRole::kMember, "Heartbeat");
  EXPECT_THAT(Check(verifier, first), IsOk());
  EXPECT_THAT(Check(verifier, first),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("used before (a replayed call")));
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat")), IsOk());
  EXPECT_EQ(verifier.remembered(), 2u);
}

// A credential binds the method, the caller's identity, the job and the
// role: none can be moved to another.
TEST(CallVerifierTest, BindsMethodCallerJobAndRole) {
  CallVerifier verifier;
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat"),
                    CallRole::kMember, "EndRun"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not under this service's secret")));
  EXPECT_THAT(
      Check(verifier, Sign(CallRole::kMember, "Heartbeat"), CallRole::kMember,
            "Heartbeat", CallIdentity{"node-b", "10.0.0.2:29500"}),
      StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat"),
                    CallRole::kMember, "Heartbeat", kNode, "another-job"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Check(verifier, Sign(CallRole::kOperator, "Heartbeat")),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("an operator's credential; this call takes "
                                 "only a member's")));
}

// Another secret's credential proves nothing; a service with two secrets
// (operators' and the cluster's) takes either.
TEST(CallVerifierTest, OnlyUnderTheServicesSecrets) {
  CallVerifier verifier;
  const std::string other = Sign(CallRole::kOperator, "GetJobStatus", Now(),
                                 kOther, CallIdentity{"alice", ""}, "");
  const std::vector<absl::string_view> cluster_only = {kSecret};
  EXPECT_THAT(
      verifier.Verify(cluster_only, CallRole::kOperator, "GetJobStatus", "",
                      CallIdentity{"alice", ""}, other, Now()),
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr("operator credential is not under this service's "
                         "secret")));
  const std::vector<absl::string_view> both = {"", kSecret, kOther};
  EXPECT_THAT(verifier.Verify(both, CallRole::kOperator, "GetJobStatus", "",
                              CallIdentity{"alice", ""}, other, Now()),
              IsOk());
  const std::vector<absl::string_view> none = {""};
  EXPECT_THAT(verifier.Verify(none, CallRole::kOperator, "GetJobStatus", "",
                              CallIdentity{"alice", ""}, other, Now()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("no secret to check it under")));
}

// A credential made more than the window away from the service's clock,
// either way, is refused naming the gap; inside it, it is taken.
TEST(CallVerifierTest, RefusesCredentialsOutsideTheWindow) {
  CallVerifier verifier;
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat",
                                   Now() - absl::Seconds(61))),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("made 1m1s before this clock's now (at most "
                                 "1m either way: are the hosts' clocks "
                                 "synchronised")));
  EXPECT_THAT(
      Check(verifier,
            Sign(CallRole::kMember, "Heartbeat", Now() + absl::Seconds(90))),
      StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("after")));
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat",
                                   Now() - absl::Seconds(59))),
              IsOk());
}

// Nonces are forgotten only once their credentials are outside the window
// (a replay then fails on the time); past the bound, calls are refused
// instead of remembered without end.
TEST(CallVerifierTest, RemembersBoundedAndForgetsOnlyExpired) {
  CallVerifier verifier({.window = absl::Seconds(60), .max_remembered = 2});
  const std::string a = Sign(CallRole::kMember, "Heartbeat");
  EXPECT_THAT(Check(verifier, a), IsOk());
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat")), IsOk());
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat")),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("more than 2 calls within 1m")));
  // 61 s later the first two have left the window.
  const absl::Time later = Now() + absl::Seconds(61);
  EXPECT_THAT(Check(verifier, Sign(CallRole::kMember, "Heartbeat", later),
                    CallRole::kMember, "Heartbeat", kNode, "job", later),
              IsOk());
  EXPECT_EQ(verifier.remembered(), 1u);
  EXPECT_THAT(
      Check(verifier, a, CallRole::kMember, "Heartbeat", kNode, "job", later),
      StatusIs(absl::StatusCode::kPermissionDenied,
               HasSubstr("before this clock's now")));
}

// No credential, a static string, a truncated or tampered one: each is
// refused with a reason, none crashes.
TEST(CallVerifierTest, RefusesMissingAndMalformed) {
  CallVerifier verifier;
  EXPECT_THAT(Check(verifier, ""),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("carries no credential")));
  const std::string good = Sign(CallRole::kMember, "Heartbeat");
  for (const std::string& bad :
       {std::string("hunter2"), good.substr(0, good.size() - 1),
        good + " extra", "v1" + good.substr(2),
        std::string("v2 member notatime 00 00")}) {
    EXPECT_THAT(
        Check(verifier, bad),
        StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("malformed")))
        << bad;
  }
  std::string tampered = good;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  EXPECT_THAT(Check(verifier, tampered),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("not under this service's secret")));
  EXPECT_EQ(verifier.remembered(), 0u);
}

}  // namespace
}  // namespace starling
