#include "server/base/call_credential.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "server/base/logging.h"
#include "server/base/printable.h"

namespace starling {
namespace {

constexpr char kVersion[] = "v2";
constexpr char kLabel[] = "starling call credential v2";
constexpr size_t kNonceBytes = 16;
constexpr size_t kMacBytes = 32;

std::string Hex(const uint8_t* bytes, size_t n) {
  std::string hex;
  hex.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&hex, "%02x", bytes[i]);
  return hex;
}

bool IsLowerHex(absl::string_view text, size_t digits) {
  if (text.size() != digits) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Lower-case hex of the MAC over everything the credential binds.
std::string Mac(absl::string_view secret, absl::string_view role,
                absl::string_view method, absl::string_view scope,
                const CallIdentity& caller, absl::string_view time,
                absl::string_view nonce) {
  std::string message(kLabel);
  for (absl::string_view part :
       {role, method, scope, absl::string_view(caller.host),
        absl::string_view(caller.address), time, nonce}) {
    message.push_back('\0');
    message.append(part.data(), part.size());
  }
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       digest, &length);
  return Hex(digest, length);
}

absl::Status Refused(absl::string_view why) {
  return absl::PermissionDeniedError(why);
}

}  // namespace

absl::string_view CallRoleName(CallRole role) {
  return role == CallRole::kMember ? "member" : "operator";
}

bool SignedWithClusterSecret(absl::string_view method) {
  return method == "Join" || method == "Rejoin";
}

absl::StatusOr<std::string> SignCall(absl::string_view secret, CallRole role,
                                     absl::string_view method,
                                     absl::string_view scope,
                                     const CallIdentity& caller,
                                     absl::Time now) {
  STARLING_CHECK(!secret.empty()) << "a call credential needs a secret";
  uint8_t nonce_bytes[kNonceBytes];
  if (RAND_bytes(nonce_bytes, sizeof(nonce_bytes)) != 1) {
    return absl::InternalError("RAND_bytes failed: no nonce for a credential");
  }
  const std::string nonce = Hex(nonce_bytes, sizeof(nonce_bytes));
  const std::string time = absl::StrCat(absl::ToUnixMillis(now));
  const absl::string_view role_name = CallRoleName(role);
  return absl::StrCat(
      kVersion, " ", role_name, " ", time, " ", nonce, " ",
      Mac(secret, role_name, method, scope, caller, time, nonce));
}

CallVerifier::CallVerifier(Options options) : options_(options) {}

size_t CallVerifier::remembered() const {
  absl::MutexLock lock(&mu_);
  return seen_.size();
}

absl::Status CallVerifier::Verify(absl::Span<const absl::string_view> secrets,
                                  CallRole role, absl::string_view method,
                                  absl::string_view scope,
                                  const CallIdentity& caller,
                                  absl::string_view credential,
                                  absl::Time now) {
  if (credential.empty()) return Refused("it carries no credential");
  const std::vector<absl::string_view> parts = absl::StrSplit(credential, ' ');
  int64_t millis = 0;
  if (parts.size() != 5 || parts[0] != kVersion ||
      !absl::SimpleAtoi(parts[2], &millis) ||
      !IsLowerHex(parts[3], 2 * kNonceBytes) ||
      !IsLowerHex(parts[4], 2 * kMacBytes)) {
    return Refused(absl::StrCat(
        "its credential is malformed (not 'v2 ROLE UNIX_MS NONCE MAC': a "
        "Starling of another version, or not a Starling credential)"));
  }
  if (parts[1] != CallRoleName(role)) {
    const absl::string_view carried = parts[1] == "member" ? "a member's"
                                      : parts[1] == "operator"
                                          ? "an operator's"
                                          : "an unknown role's";
    return Refused(absl::StrCat(
        "it carries ", carried, " credential; this call takes only ",
        role == CallRole::kMember ? "a member's" : "an operator's"));
  }
  const absl::Time at = absl::FromUnixMillis(millis);
  const absl::Duration apart = absl::AbsDuration(now - at);
  if (apart > options_.window) {
    return Refused(absl::StrCat(
        "its credential was made ", absl::FormatDuration(apart),
        at < now ? " before" : " after", " this clock's now (at most ",
        absl::FormatDuration(options_.window),
        " either way: are the hosts' clocks synchronised, by NTP?)"));
  }
  bool under_one = false;
  int secrets_tried = 0;
  for (absl::string_view secret : secrets) {
    if (secret.empty()) continue;
    ++secrets_tried;
    const std::string expected =
        Mac(secret, parts[1], method, scope, caller, parts[2], parts[3]);
    if (CRYPTO_memcmp(expected.data(), parts[4].data(), expected.size()) == 0) {
      under_one = true;
      break;
    }
  }
  if (!under_one) {
    return Refused(
        secrets_tried == 0
            ? std::string("this service has no secret to check it under")
            : absl::StrCat(
                  "its ", CallRoleName(role),
                  " credential is not under this service's secret (another "
                  "secret file, a caller that does not know the secret, or a "
                  "credential made for another call or caller)"));
  }
  absl::MutexLock lock(&mu_);
  while (!order_.empty() && order_.front().first < now) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (seen_.contains(parts[3])) {
    return Refused(
        "its credential was used before (a replayed call: each is taken "
        "once)");
  }
  if (seen_.size() >= options_.max_remembered) {
    return absl::ResourceExhaustedError(
        absl::StrCat("more than ", options_.max_remembered, " calls within ",
                     absl::FormatDuration(options_.window),
                     ": too many to remember; try again"));
  }
  seen_.insert(std::string(parts[3]));
  order_.emplace_back(at + options_.window, std::string(parts[3]));
  return absl::OkStatus();
}

absl::Status CallVerifier::VerifyOperator(
    absl::string_view operator_secret, absl::string_view cluster_secret,
    absl::string_view label, absl::string_view method, absl::string_view host,
    absl::string_view credential, absl::string_view service, absl::Time now) {
  if (operator_secret.empty() && cluster_secret.empty()) {
    return absl::OkStatus();
  }
  const absl::string_view secrets[] = {operator_secret, cluster_secret};
  const absl::Status verified =
      Verify(secrets, CallRole::kOperator, method, "",
             CallIdentity{std::string(host), ""}, credential, now);
  if (verified.ok()) return verified;
  return absl::Status(
      verified.code(),
      absl::StrCat(label, " from ",
                   host.empty() ? std::string("a caller that did not say who "
                                              "it is")
                                : BoundedPrintable(host, 64),
                   " refused: ", verified.message(),
                   credential.empty()
                       ? absl::StrCat("; ", service,
                                      " takes operators' calls with a "
                                      "credential only: give starlingctl "
                                      "--secret_file (the operator secret, or "
                                      "the cluster secret)")
                       : ""));
}

}  // namespace starling
