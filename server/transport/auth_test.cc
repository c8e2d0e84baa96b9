#include "server/transport/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A file under the test's temporary directory with `contents` and `mode`.
std::string WriteFile(const std::string& name, const std::string& contents,
                      mode_t mode) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/", getpid(), "-", name);
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  EXPECT_GE(fd, 0) << path;
  EXPECT_EQ(write(fd, contents.data(), contents.size()),
            static_cast<ssize_t>(contents.size()));
  close(fd);
  EXPECT_EQ(chmod(path.c_str(), mode), 0);
  return path;
}

TEST(ReadClusterSecret, ReturnsTheFileBytesAsTheyAre) {
  const std::string secret("s3cret\0with a zero\n", 19);
  const std::string path = WriteFile("good", secret, 0600);
  ASSERT_OK_AND_ASSIGN(std::string read, ReadClusterSecret(path));
  EXPECT_EQ(read, secret);
  // Owner-only read is enough.
  EXPECT_OK(ReadClusterSecret(WriteFile("owner-read", "0123456789abcdef", 0400))
                .status());
}

// A 1-byte secret used to be accepted without a word.
TEST(ReadClusterSecret, RefusesASecretShorterThan16Bytes) {
  const std::string path = WriteFile("short", "hunter2\n", 0600);
  EXPECT_THAT(ReadClusterSecret(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path),
                             HasSubstr("holds 8 bytes: a secret has "
                                       "at least 16"),
                             HasSubstr("head -c 32 /dev/urandom"))));
  EXPECT_OK(ReadClusterSecret(WriteFile("just", std::string(16, 'k'), 0600))
                .status());
}

TEST(ReadClusterSecret, RefusesAMissingFile) {
  EXPECT_THAT(ReadClusterSecret("/nonexistent/starling/secret"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/nonexistent/starling/secret")));
}

TEST(ReadClusterSecret, RefusesAnEmptyFile) {
  const std::string path = WriteFile("empty", "", 0600);
  EXPECT_THAT(ReadClusterSecret(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("is empty"))));
}

TEST(ReadClusterSecret, RefusesAFileOthersCanRead) {
  for (mode_t mode : {0640, 0604, 0644, 0660, 0602}) {
    const std::string path = WriteFile("open", "secret", mode);
    EXPECT_THAT(ReadClusterSecret(path),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr(path), HasSubstr("group and others"),
                               HasSubstr(absl::StrCat("chmod 600 ", path)))))
        << std::oct << mode;
  }
}

TEST(ReadClusterSecret, RefusesADirectory) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/", getpid(), "-dir");
  mkdir(path.c_str(), 0700);
  EXPECT_THAT(ReadClusterSecret(path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a regular file")));
}

Transcript SampleTranscript() {
  Transcript t;
  for (size_t i = 0; i < kHelloBodyBytes; ++i) {
    t.connect_hello[i] = static_cast<uint8_t>(i);
    t.accept_hello[i] = static_cast<uint8_t>(100 + i);
  }
  for (size_t i = 0; i < kNonceBytes; ++i) {
    t.connect_nonce[i] = static_cast<uint8_t>((200 + i) % 256);
    t.accept_nonce[i] = static_cast<uint8_t>(64 + i);
  }
  return t;
}

std::string Hex(const Proof& proof) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(proof.data()), proof.size()));
}

// The wire spec pinned (frame_format.md, "Authentication"; 32-byte HELLO
// bodies since version 4): values computed independently with Python's
// hmac module.
TEST(Proof, IsHmacSha256OfLabelAndTranscript) {
  const std::string secret = "correct horse battery staple";
  EXPECT_EQ(Hex(ComputeProof(secret, ProofRole::kConnect, SampleTranscript())),
            "55c0ffd6258d9d10d62917769a1e6c56cb058968a60fdb2cfff9dd4f1544d430");
  EXPECT_EQ(Hex(ComputeProof(secret, ProofRole::kAccept, SampleTranscript())),
            "4808374050e7711757fb6a31b0b890fdbb9de2848f8d828f3d1e975e3ea5f21b");
}

TEST(Proof, VerifiesOnlyTheSameSecretRoleAndTranscript) {
  const std::string secret = "secret";
  const Transcript t = SampleTranscript();
  const Proof proof = ComputeProof(secret, ProofRole::kConnect, t);
  EXPECT_TRUE(VerifyProof(secret, ProofRole::kConnect, t, proof));
  EXPECT_FALSE(VerifyProof("Secret", ProofRole::kConnect, t, proof));
  // Reflected: the accepting side's proof is not the connecting side's.
  EXPECT_FALSE(VerifyProof(secret, ProofRole::kAccept, t, proof));
  // Replayed against a fresh nonce of the other side.
  Transcript fresh = t;
  fresh.accept_nonce[7] ^= 1;
  EXPECT_FALSE(VerifyProof(secret, ProofRole::kConnect, fresh, proof));
  // Claiming another rank (the HELLO bodies are covered).
  Transcript other_rank = t;
  other_rank.connect_hello[0] ^= 1;
  EXPECT_FALSE(VerifyProof(secret, ProofRole::kConnect, other_rank, proof));
  Proof flipped = proof;
  flipped[31] ^= 0x80;
  EXPECT_FALSE(VerifyProof(secret, ProofRole::kConnect, t, flipped));
  EXPECT_FALSE(VerifyProof(secret, ProofRole::kConnect, t,
                           absl::MakeConstSpan(proof.data(), 31)));
}

TEST(Nonce, IsFreshEachTime) {
  ASSERT_OK_AND_ASSIGN(Nonce a, RandomNonce());
  ASSERT_OK_AND_ASSIGN(Nonce b, RandomNonce());
  EXPECT_NE(a, b);
}

TEST(Challenge, RoundTripsThroughItsFrame) {
  Challenge challenge;
  challenge.mode = AuthMode::kHmacSha256;
  for (size_t i = 0; i < kNonceBytes; ++i) challenge.nonce[i] = i * 7;
  uint8_t frame[kChallengeFrameBytes];
  EncodeChallengeFrame(challenge, frame);
  ASSERT_OK_AND_ASSIGN(FrameHeader header, DecodeFrameHeader(frame));
  EXPECT_EQ(header.type, FrameType::kChallenge);
  EXPECT_EQ(header.length, kChallengeBodyBytes);
  ASSERT_OK_AND_ASSIGN(Challenge decoded,
                       DecodeChallengeBody(absl::MakeConstSpan(
                           frame + kFrameHeaderBytes, kChallengeBodyBytes)));
  EXPECT_EQ(decoded.mode, AuthMode::kHmacSha256);
  EXPECT_EQ(decoded.nonce, challenge.nonce);
}

TEST(Challenge, MalformedBodiesAreDataLoss) {
  uint8_t frame[kChallengeFrameBytes];
  EncodeChallengeFrame(Challenge(), frame);
  uint8_t* body = frame + kFrameHeaderBytes;
  EXPECT_THAT(DecodeChallengeBody(absl::MakeConstSpan(body, 39)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("39 bytes")));
  body[0] = 3;
  EXPECT_THAT(DecodeChallengeBody(absl::MakeConstSpan(body, 40)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("mode 3")));
  body[0] = 0;
  body[5] = 1;
  EXPECT_THAT(DecodeChallengeBody(absl::MakeConstSpan(body, 40)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("reserved")));
}

TEST(Proof, FrameCarriesTheProof) {
  const Proof proof = ComputeProof("k", ProofRole::kAccept, SampleTranscript());
  uint8_t frame[kProofFrameBytes];
  EncodeProofFrame(proof, frame);
  ASSERT_OK_AND_ASSIGN(FrameHeader header, DecodeFrameHeader(frame));
  EXPECT_EQ(header.type, FrameType::kProof);
  EXPECT_EQ(header.length, kProofBodyBytes);
  EXPECT_TRUE(VerifyProof(
      "k", ProofRole::kAccept, SampleTranscript(),
      absl::MakeConstSpan(frame + kFrameHeaderBytes, kProofBodyBytes)));
}

}  // namespace
}  // namespace transport
}  // namespace starling
