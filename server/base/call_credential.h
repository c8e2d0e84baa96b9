// Per-call credentials of the control plane: the coordinator's gRPC
// service and the node daemons' NodeAdmin service. A caller that knows a
// secret signs every call it makes:
//
//   starling-credential: v2 <role> <unix ms> <nonce, 32 hex> <mac, 64 hex>
//
// where mac is HMAC-SHA256 under the secret over the role, the method
// ("Heartbeat", "GetJobStatus", ...), the scope (a member's job id; "" for
// operators), the caller's identity (its hostname and data address, sent
// beside it as starling-member-host and starling-member-address), the time
// and the nonce. The service takes a credential once, within a window of
// its own clock (60 s by default), so one seen on the wire can be neither
// replayed nor used for another method, job, identity or role. Built on
// OpenSSL's libcrypto (HMAC, RAND_bytes, CRYPTO_memcmp).
//
// Roles: a node daemon calls as kMember under the cluster secret; an
// operator (starlingctl) calls as kOperator under the operator secret, or
// the cluster secret where the services have no operator secret of their
// own. What each service accepts is its business (Coordinator::CheckCaller,
// NodeAdminService).
#ifndef STARLING_SERVER_BASE_CALL_CREDENTIAL_H_
#define STARLING_SERVER_BASE_CALL_CREDENTIAL_H_

#include <cstddef>
#include <deque>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace starling {

// gRPC metadata keys (lower case, as gRPC wants them).
inline constexpr char kCallCredentialKey[] = "starling-credential";
inline constexpr char kCallerHostKey[] = "starling-member-host";
inline constexpr char kCallerAddressKey[] = "starling-member-address";

enum class CallRole { kMember, kOperator };

// "member" or "operator".
absl::string_view CallRoleName(CallRole role);

// True for the member calls signed under the cluster secret itself: Join
// and Rejoin, which a node makes before it holds a key of its own. Every
// other member call is signed under the member's own key (the
// coordinator's JoinResponse.member_key) once it has one.
bool SignedWithClusterSecret(absl::string_view method);

// What a call says of its caller.
struct CallIdentity {
  std::string host;
  std::string address;  // a member's data address; "" for an operator
};

// A credential for one call made at `now`, with a fresh random nonce.
// Internal if the random generator fails. REQUIRES: `secret` not empty.
absl::StatusOr<std::string> SignCall(absl::string_view secret, CallRole role,
                                     absl::string_view method,
                                     absl::string_view scope,
                                     const CallIdentity& caller,
                                     absl::Time now);

// Checks credentials and remembers the nonces it took until they are
// outside the window, so that each is taken once. Thread-safe.
class CallVerifier {
 public:
  struct Options {
    // How far a credential's time may be from this clock, either way.
    absl::Duration window = absl::Seconds(60);
    // The most nonces remembered at once; past it, calls are refused
    // (ResourceExhausted) until older ones leave the window.
    size_t max_remembered = size_t{1} << 20;
  };
  CallVerifier() : CallVerifier(Options()) {}
  explicit CallVerifier(Options options);

  // OK when `credential` is `role`'s for `method`, `scope` and `caller`
  // under one of `secrets` (empty ones skipped), its time within the
  // window of `now` and its nonce not taken before. Else PermissionDenied
  // saying why (no credential, malformed, another role, the clocks apart,
  // not under these secrets, already used) or ResourceExhausted; the
  // message does not name the call (the caller adds that).
  absl::Status Verify(absl::Span<const absl::string_view> secrets,
                      CallRole role, absl::string_view method,
                      absl::string_view scope, const CallIdentity& caller,
                      absl::string_view credential, absl::Time now);

  // An operator's call (status, a node's admin service): OK when both
  // secrets are empty, or when `credential` is a fresh operator credential
  // for `method` under either. Else Verify's refusal as "LABEL from HOST
  // refused: why", with, for a call that carries no credential at all, how
  // to sign one (`service`, "this coordinator" or "this node", takes them
  // only so).
  absl::Status VerifyOperator(absl::string_view operator_secret,
                              absl::string_view cluster_secret,
                              absl::string_view label, absl::string_view method,
                              absl::string_view host,
                              absl::string_view credential,
                              absl::string_view service, absl::Time now);

  // Nonces remembered now.
  size_t remembered() const;

 private:
  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<std::string> seen_ ABSL_GUARDED_BY(mu_);
  // Nonces in the order taken, with the time each leaves the window.
  std::deque<std::pair<absl::Time, std::string>> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace starling

#endif  // STARLING_SERVER_BASE_CALL_CREDENTIAL_H_
