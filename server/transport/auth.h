// Cluster-secret authentication of data-plane connections
// (frame_format.md, "Authentication"): the CHALLENGE and PROOF frames, the
// HMAC-SHA256 proofs over one connection's handshake transcript, nonces, and
// reading the secret from its file. Built on OpenSSL's libcrypto (HMAC,
// RAND_bytes, CRYPTO_memcmp). Which frames a handshake exchanges, and when,
// is tcp/handshaker.h's business. Thread-safe: no state.
#ifndef STARLING_SERVER_TRANSPORT_AUTH_H_
#define STARLING_SERVER_TRANSPORT_AUTH_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kChallengeFrameBytes =
    kFrameHeaderBytes + kChallengeBodyBytes;
inline constexpr size_t kProofFrameBytes = kFrameHeaderBytes + kProofBodyBytes;
// A secret file larger than this is refused: it is not a secret but a
// mistake (the wrong path).
inline constexpr size_t kMaxClusterSecretBytes = 64 * 1024;
// A shorter secret is refused: a few bytes can be guessed, and the daemon
// would accept it without a word.
inline constexpr size_t kMinClusterSecretBytes = 16;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBodyBytes>;

// What a side offers in its CHALLENGE.
enum class AuthMode : uint32_t {
  kNone = 0,        // no key: loopback peers only (or insecure)
  kHmacSha256 = 1,  // proves knowledge of the cluster secret (and group key)
  kGroupKey = 2,    // proves the group key alone: no cluster secret
};

struct Challenge {
  AuthMode mode = AuthMode::kNone;
  Nonce nonce = {};
};

// Which side's proof: the connecting side's and the accepting side's differ
// (their transcripts carry different labels), so neither can be reflected
// back as the other.
enum class ProofRole { kConnect, kAccept };

// Everything one connection's proofs cover: both HELLO bodies (ranks, group
// size, socket index, as sent) and both nonces.
struct Transcript {
  std::array<uint8_t, kHelloBodyBytes> connect_hello = {};
  std::array<uint8_t, kHelloBodyBytes> accept_hello = {};
  Nonce connect_nonce = {};
  Nonce accept_nonce = {};
};

// Reads the cluster secret (raw bytes, used as they are, trailing newline
// included) from `path`. NotFound or PermissionDenied if it cannot be read,
// InvalidArgument if it is empty, shorter than kMinClusterSecretBytes,
// larger than kMaxClusterSecretBytes or not
// a regular file, FailedPrecondition if group or others have any access to
// it (the message says to chmod 600).
absl::StatusOr<std::string> ReadClusterSecret(const std::string& path);
// The daemons' and the coordinator's --cluster_secret_file: "" for an
// empty path, else ReadClusterSecret's secret, its errors InvalidArgument
// naming the flag.
absl::StatusOr<std::string> ClusterSecretFromFlag(const std::string& path);
// The same for any secret file's flag (--operator_secret_file,
// starlingctl's --secret_file): errors name `flag`.
absl::StatusOr<std::string> SecretFromFlag(absl::string_view flag,
                                           const std::string& path);

// A fresh random nonce (RAND_bytes). Internal if the generator fails.
absl::StatusOr<Nonce> RandomNonce();

// CHALLENGE frame (header and body), ready to send.
void EncodeChallengeFrame(const Challenge& challenge,
                          uint8_t (&out)[kChallengeFrameBytes]);

// Decodes a CHALLENGE body. DataLoss if it is not kChallengeBodyBytes long,
// has a nonzero reserved word or an unknown mode.
absl::StatusOr<Challenge> DecodeChallengeBody(absl::Span<const uint8_t> body);

// PROOF frame (header and body), ready to send.
void EncodeProofFrame(const Proof& proof, uint8_t (&out)[kProofFrameBytes]);

// HMAC-SHA256 keyed by `secret` over `role`'s label and `transcript`.
// REQUIRES: `secret` is not empty.
Proof ComputeProof(absl::string_view secret, ProofRole role,
                   const Transcript& transcript);

// Whether `proof` is `role`'s proof of `transcript` under `secret`; compares
// in constant time. False for a proof of the wrong size.
bool VerifyProof(absl::string_view secret, ProofRole role,
                 const Transcript& transcript, absl::Span<const uint8_t> proof);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_AUTH_H_
