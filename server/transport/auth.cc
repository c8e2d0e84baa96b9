#include "server/transport/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {
namespace {

// Transcript labels (frame_format.md): each ends with a zero byte, so that
// no label is a prefix of another's message.
constexpr char kConnectLabel[] = "starling v3 connect proof";
constexpr char kAcceptLabel[] = "starling v3 accept proof";

absl::Status FileError(int err, const std::string& path) {
  char buffer[128];
  // GNU strerror_r returns the message pointer.
  const std::string message =
      absl::StrCat("cluster secret file ", path, ": ",
                   strerror_r(err, buffer, sizeof(buffer)));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> ReadClusterSecret(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return FileError(errno, path);
  struct stat st;
  std::string secret;
  absl::Status status;
  // fstat() on the open file: the checks apply to what is read.
  if (fstat(fd, &st) != 0) {
    status = FileError(errno, path);
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("cluster secret file ", path, " is not a regular file"));
  } else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    status = absl::FailedPreconditionError(absl::StrFormat(
        "cluster secret file %s has mode %04o: group and others must have no "
        "access to it (run: chmod 600 %s)",
        path, st.st_mode & 07777, path));
  } else if (static_cast<uint64_t>(st.st_size) > kMaxClusterSecretBytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat("cluster secret file ", path, " holds ", st.st_size,
                     " bytes, more than the ", kMaxClusterSecretBytes,
                     " a secret may have (wrong file?)"));
  } else {
    // Read to the end: the size may have changed since fstat().
    char buffer[4096];
    while (true) {
      const ssize_t n = read(fd, buffer, sizeof(buffer));
      if (n < 0) {
        if (errno == EINTR) continue;
        status = FileError(errno, path);
        break;
      }
      if (n == 0) break;
      secret.append(buffer, n);
      if (secret.size() > kMaxClusterSecretBytes) {
        status = absl::InvalidArgumentError(
            absl::StrCat("cluster secret file ", path, " holds more than ",
                         kMaxClusterSecretBytes, " bytes (wrong file?)"));
        break;
      }
    }
  }
  close(fd);
  if (!status.ok()) return status;
  if (secret.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster secret file ", path, " is empty"));
  }
  if (secret.size() < kMinClusterSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster secret file ", path, " holds ", secret.size(),
                     " byte", secret.size() == 1 ? "" : "s",
                     ": a secret has at least ", kMinClusterSecretBytes,
                     " (make one: head -c 32 /dev/urandom | base64 > ", path,
                     "; chmod 600 ", path, ")"));
  }
  return secret;
}

absl::StatusOr<Nonce> RandomNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), nonce.size()) != 1) {
    return absl::InternalError("RAND_bytes failed to produce a nonce");
  }
  return nonce;
}

void EncodeChallengeFrame(const Challenge& challenge,
                          uint8_t (&out)[kChallengeFrameBytes]) {
  FrameHeader header;
  header.type = FrameType::kChallenge;
  header.length = kChallengeBodyBytes;
  uint8_t encoded[kFrameHeaderBytes];
  EncodeFrameHeader(header, encoded);
  std::copy(encoded, encoded + kFrameHeaderBytes, out);
  uint8_t* body = out + kFrameHeaderBytes;
  PutLittleEndian32(static_cast<uint32_t>(challenge.mode), body + 0);
  PutLittleEndian32(0, body + 4);
  std::copy(challenge.nonce.begin(), challenge.nonce.end(), body + 8);
}

absl::StatusOr<Challenge> DecodeChallengeBody(absl::Span<const uint8_t> body) {
  if (body.size() != kChallengeBodyBytes) {
    return absl::DataLossError(absl::StrCat("CHALLENGE body is ", body.size(),
                                            " bytes, expected ",
                                            kChallengeBodyBytes));
  }
  const uint32_t mode = GetLittleEndian32(body.data() + 0);
  const uint32_t reserved = GetLittleEndian32(body.data() + 4);
  if (reserved != 0) {
    return absl::DataLossError(
        absl::StrCat("CHALLENGE has nonzero reserved word ", reserved));
  }
  if (mode != static_cast<uint32_t>(AuthMode::kNone) &&
      mode != static_cast<uint32_t>(AuthMode::kHmacSha256) &&
      mode != static_cast<uint32_t>(AuthMode::kGroupKey)) {
    return absl::DataLossError(
        absl::StrCat("CHALLENGE has unknown authentication mode ", mode));
  }
  Challenge challenge;
  challenge.mode = static_cast<AuthMode>(mode);
  std::copy(body.begin() + 8, body.end(), challenge.nonce.begin());
  return challenge;
}

void EncodeProofFrame(const Proof& proof, uint8_t (&out)[kProofFrameBytes]) {
  FrameHeader header;
  header.type = FrameType::kProof;
  header.length = kProofBodyBytes;
  uint8_t encoded[kFrameHeaderBytes];
  EncodeFrameHeader(header, encoded);
  std::copy(encoded, encoded + kFrameHeaderBytes, out);
  std::copy(proof.begin(), proof.end(), out + kFrameHeaderBytes);
}

absl::StatusOr<std::string> SecretFromFlag(absl::string_view flag,
                                           const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> secret = ReadClusterSecret(path);
  if (!secret.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", secret.status().message()));
  }
  return secret;
}

absl::StatusOr<std::string> ClusterSecretFromFlag(const std::string& path) {
  return SecretFromFlag("--cluster_secret_file", path);
}

Proof ComputeProof(absl::string_view secret, ProofRole role,
                   const Transcript& transcript) {
  STARLING_CHECK(!secret.empty()) << "a proof needs a cluster secret";
  const absl::string_view label =
      role == ProofRole::kConnect ? kConnectLabel : kAcceptLabel;
  std::vector<uint8_t> message;
  message.reserve(label.size() + 1 + 2 * kHelloBodyBytes + 2 * kNonceBytes);
  message.insert(message.end(), label.begin(), label.end());
  message.push_back(0);
  message.insert(message.end(), transcript.connect_hello.begin(),
                 transcript.connect_hello.end());
  message.insert(message.end(), transcript.accept_hello.begin(),
                 transcript.accept_hello.end());
  message.insert(message.end(), transcript.connect_nonce.begin(),
                 transcript.connect_nonce.end());
  message.insert(message.end(), transcript.accept_nonce.begin(),
                 transcript.accept_nonce.end());
  Proof proof;
  unsigned int length = 0;
  const unsigned char* digest =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           message.data(), message.size(), proof.data(), &length);
  // Only a broken libcrypto fails here; nothing a peer sends can cause it.
  STARLING_CHECK(digest != nullptr && length == proof.size())
      << "HMAC-SHA256 failed";
  return proof;
}

bool VerifyProof(absl::string_view secret, ProofRole role,
                 const Transcript& transcript,
                 absl::Span<const uint8_t> proof) {
  if (proof.size() != kProofBodyBytes) return false;
  const Proof expected = ComputeProof(secret, role, transcript);
  return CRYPTO_memcmp(expected.data(), proof.data(), expected.size()) == 0;
}

}  // namespace transport
}  // namespace starling
