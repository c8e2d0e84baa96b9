// Handshaker driven in memory: both sides of one connection, attackers that
// forge, replay or reflect, and the secret policy.
#include "server/transport/tcp/handshaker.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/auth.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Name(int rank) {
  return absl::StrCat("rank ", rank, " (10.0.0.", rank, ":7000)");
}

Nonce MakeNonce(uint8_t seed) {
  Nonce nonce;
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = seed + i;
  return nonce;
}

// Rank 2 dialling rank 0 (group of 3), socket 1 of 2.
HandshakeConfig ConnectConfig(const std::string& secret) {
  HandshakeConfig config;
  config.role = HandshakeConfig::Role::kConnect;
  config.local.sender_rank = 2;
  config.local.group_size = 3;
  config.local.socket_index = 1;
  config.local.sockets_per_peer = 2;
  config.local.receiver_rank = 0;
  config.secret = secret;
  config.peer_is_loopback = true;
  config.peer_address = "10.0.0.0:7000";
  config.name = Name;
  config.nonce = MakeNonce(1);
  return config;
}

HandshakeConfig AcceptConfig(const std::string& secret) {
  HandshakeConfig config;
  config.role = HandshakeConfig::Role::kAccept;
  config.local.sender_rank = 0;
  config.local.group_size = 3;
  config.local.sockets_per_peer = 2;
  config.secret = secret;
  config.peer_is_loopback = true;
  config.peer_address = "10.0.0.2:51234";
  config.name = Name;
  config.nonce = MakeNonce(100);
  return config;
}

// Feeds `bytes` to `side` exactly as a socket reader would; returns the
// first error. Consumed bytes are erased; what is left was not wanted.
absl::Status Feed(Handshaker& side, std::vector<uint8_t>& bytes,
                  std::vector<uint8_t>* out) {
  absl::Status first;
  while (!bytes.empty() && side.BytesWanted() > 0) {
    const size_t n = std::min(side.BytesWanted(), bytes.size());
    absl::Status status = side.Consume(bytes.data(), n, out);
    bytes.erase(bytes.begin(), bytes.begin() + n);
    if (first.ok()) first = status;
  }
  return first;
}

struct Outcome {
  absl::Status connect;
  absl::Status accept;
  Handshaker::State connect_state;
  Handshaker::State accept_state;
  std::vector<uint8_t> connect_sent;  // everything the connecting side sent
};

// Runs a whole handshake between two in-memory sides.
Outcome Handshake(HandshakeConfig connect_config,
                  HandshakeConfig accept_config) {
  Handshaker connect(std::move(connect_config));
  Handshaker accept(std::move(accept_config));
  Outcome outcome;
  std::vector<uint8_t> to_accept;
  std::vector<uint8_t> to_connect;
  outcome.connect = connect.Start(&to_accept);
  outcome.accept = accept.Start(&to_connect);
  for (int round = 0; round < 10; ++round) {
    outcome.connect_sent.insert(outcome.connect_sent.end(), to_accept.begin(),
                                to_accept.end());
    absl::Status a = Feed(accept, to_accept, &to_connect);
    if (outcome.accept.ok()) outcome.accept = a;
    if (accept.state() == Handshaker::State::kAuthenticated) {
      accept.Admit(&to_connect);
    }
    absl::Status c = Feed(connect, to_connect, &to_accept);
    if (outcome.connect.ok()) outcome.connect = c;
    if (to_accept.empty() && to_connect.empty()) break;
  }
  outcome.connect_state = connect.state();
  outcome.accept_state = accept.state();
  return outcome;
}

TEST(Handshaker, SameSecretAuthenticatesBothWays) {
  Handshaker connect(ConnectConfig("s3cret"));
  Handshaker accept(AcceptConfig("s3cret"));
  std::vector<uint8_t> to_accept, to_connect;
  ASSERT_OK(connect.Start(&to_accept));
  ASSERT_OK(Feed(accept, to_accept, &to_connect));
  // The peer proved itself; the caller decides on its slot.
  ASSERT_EQ(accept.state(), Handshaker::State::kRunning);
  ASSERT_OK(Feed(connect, to_connect, &to_accept));
  ASSERT_OK(Feed(accept, to_accept, &to_connect));
  ASSERT_EQ(accept.state(), Handshaker::State::kAuthenticated);
  EXPECT_EQ(accept.remote().sender_rank, 2u);
  EXPECT_EQ(accept.remote().socket_index, 1u);
  EXPECT_EQ(connect.state(), Handshaker::State::kRunning);
  accept.Admit(&to_connect);
  EXPECT_EQ(accept.state(), Handshaker::State::kDone);
  EXPECT_EQ(accept.BytesWanted(), 0u);
  ASSERT_OK(Feed(connect, to_connect, &to_accept));
  EXPECT_EQ(connect.state(), Handshaker::State::kDone);
  EXPECT_EQ(connect.BytesWanted(), 0u);
  EXPECT_TRUE(to_accept.empty());
  EXPECT_TRUE(to_connect.empty());
}

TEST(Handshaker, NoSecretOnLoopbackIsAccepted) {
  Outcome outcome = Handshake(ConnectConfig(""), AcceptConfig(""));
  EXPECT_OK(outcome.connect);
  EXPECT_OK(outcome.accept);
  EXPECT_EQ(outcome.connect_state, Handshaker::State::kDone);
  EXPECT_EQ(outcome.accept_state, Handshaker::State::kDone);
}

TEST(Handshaker, DifferentSecretsFailOnBothSides) {
  Outcome outcome = Handshake(ConnectConfig("one"), AcceptConfig("two"));
  EXPECT_THAT(outcome.connect,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(Name(0)),
                             HasSubstr("failed the cluster-secret challenge"),
                             HasSubstr("--cluster_secret_file"))));
  // The connecting side told the accepting side why.
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("failed the cluster-secret challenge")));
  EXPECT_EQ(outcome.connect_state, Handshaker::State::kFailed);
  EXPECT_EQ(outcome.accept_state, Handshaker::State::kFailed);
}

TEST(Handshaker, SecretOnOneSideOnlyIsRefusedNamingTheFix) {
  Outcome outcome = Handshake(ConnectConfig(""), AcceptConfig("s3cret"));
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(Name(2) + " has no cluster secret but " +
                                       Name(0) + " requires one"),
                             HasSubstr("--cluster_secret_file"))));
  EXPECT_THAT(outcome.connect, StatusIs(absl::StatusCode::kUnauthenticated,
                                        HasSubstr("requires one")));
  outcome = Handshake(ConnectConfig("s3cret"), AcceptConfig(""));
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr(Name(2) + " uses a cluster secret but " +
                                 Name(0) + " has none")));
  EXPECT_THAT(outcome.connect, StatusIs(absl::StatusCode::kUnauthenticated,
                                        HasSubstr("has none")));
}

// Every node proves the coordinator's group key; one also has the cluster
// secret file and the other not: named as a missing secret file on one
// side, on both sides, not as a failed proof or a forged HELLO.
TEST(Handshaker, ASecretFileMissingOnOneNodeIsNamedAsThat) {
  HandshakeConfig key_only = ConnectConfig("group-key");
  key_only.group_key_only = true;
  Outcome outcome = Handshake(key_only, AcceptConfig("s3cretgroup-key"));
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(Name(2) + " has no cluster secret but " +
                                       Name(0) + " requires one"),
                             HasSubstr("--cluster_secret_file missing on " +
                                       Name(2) + "'s node"))));
  // The connecting side hears the refusal, with the same text.
  EXPECT_THAT(outcome.connect,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("--cluster_secret_file missing on " + Name(2) +
                                 "'s node")));
  EXPECT_THAT(outcome.accept.message(),
              Not(HasSubstr("failed the cluster-secret challenge")));
  HandshakeConfig key_only_accept = AcceptConfig("group-key");
  key_only_accept.group_key_only = true;
  outcome = Handshake(ConnectConfig("s3cretgroup-key"), key_only_accept);
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(Name(2) + " uses a cluster secret but " +
                                       Name(0) + " has none"),
                             HasSubstr("missing on " + Name(0) + "'s node"))));
}

TEST(Handshaker, NonLoopbackPeerWithoutSecretIsRefusedUnlessInsecure) {
  HandshakeConfig accept = AcceptConfig("");
  accept.peer_is_loopback = false;
  Outcome outcome = Handshake(ConnectConfig(""), accept);
  const auto fix =
      AllOf(HasSubstr("10.0.0.2:51234"), HasSubstr(Name(2)),
            HasSubstr("only loopback peers"),
            HasSubstr("--cluster_secret_file"), HasSubstr("--insecure"));
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated, fix));
  EXPECT_THAT(outcome.connect,
              StatusIs(absl::StatusCode::kUnauthenticated, fix));
  accept.insecure = true;
  outcome = Handshake(ConnectConfig(""), accept);
  EXPECT_OK(outcome.accept);
  EXPECT_OK(outcome.connect);
  // The connecting side applies the same policy before it sends a byte.
  HandshakeConfig connect = ConnectConfig("");
  connect.peer_is_loopback = false;
  Handshaker dialer(connect);
  std::vector<uint8_t> out;
  EXPECT_THAT(dialer.Start(&out),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr(Name(0) + " is not on a loopback"),
                             HasSubstr("--cluster_secret_file"),
                             HasSubstr("--insecure"))));
  EXPECT_TRUE(out.empty());
  // With a secret, any address will do.
  HandshakeConfig remote_accept = AcceptConfig("s3cret");
  remote_accept.peer_is_loopback = false;
  HandshakeConfig remote_connect = ConnectConfig("s3cret");
  remote_connect.peer_is_loopback = false;
  outcome = Handshake(remote_connect, remote_accept);
  EXPECT_OK(outcome.accept);
  EXPECT_OK(outcome.connect);
}

// Without a cluster secret the coordinator's group key still keeps a
// process that is not a member out, even on loopback; the key travelled
// over the control plane, so the loopback rule still holds.
TEST(Handshaker, GroupKeyKeepsNonMembersOutAndLoopbackRuleStays) {
  HandshakeConfig member_connect = ConnectConfig("group-key");
  member_connect.group_key_only = true;
  HandshakeConfig member_accept = AcceptConfig("group-key");
  member_accept.group_key_only = true;
  Outcome outcome = Handshake(member_connect, member_accept);
  EXPECT_OK(outcome.connect);
  EXPECT_OK(outcome.accept);
  EXPECT_EQ(outcome.accept_state, Handshaker::State::kDone);

  // A stranger who guessed a key.
  HandshakeConfig stranger = ConnectConfig("guess");
  stranger.group_key_only = true;
  outcome = Handshake(stranger, member_accept);
  EXPECT_THAT(outcome.accept,
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("10.0.0.2:51234"),
                             HasSubstr("claiming to be " + Name(2)),
                             HasSubstr("not a member of the group"))));
  EXPECT_NE(outcome.accept_state, Handshaker::State::kDone);

  // A stranger with no key at all.
  outcome = Handshake(ConnectConfig(""), member_accept);
  EXPECT_THAT(outcome.accept, StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_NE(outcome.accept_state, Handshaker::State::kDone);

  // The group key alone does not open non-loopback addresses.
  HandshakeConfig remote_accept = member_accept;
  remote_accept.peer_is_loopback = false;
  outcome = Handshake(member_connect, remote_accept);
  EXPECT_THAT(outcome.accept, StatusIs(absl::StatusCode::kUnauthenticated,
                                       HasSubstr("only loopback peers")));
  remote_accept.insecure = true;
  outcome = Handshake(member_connect, remote_accept);
  EXPECT_OK(outcome.accept);
}

// An attacker who recorded a whole successful handshake plays the
// connecting side's bytes again: the accepting side's fresh nonce makes the
// recorded proof worthless.
TEST(Handshaker, ReplayedHandshakeIsRefused) {
  Outcome recorded = Handshake(ConnectConfig("s3cret"), AcceptConfig("s3cret"));
  ASSERT_OK(recorded.accept);
  HandshakeConfig again = AcceptConfig("s3cret");
  again.nonce = MakeNonce(200);
  Handshaker accept(again);
  std::vector<uint8_t> replay = recorded.connect_sent;
  std::vector<uint8_t> out;
  EXPECT_THAT(
      Feed(accept, replay, &out),
      StatusIs(absl::StatusCode::kUnauthenticated,
               AllOf(HasSubstr("10.0.0.2:51234"),
                     HasSubstr("claiming to be " + Name(2)),
                     HasSubstr("failed the cluster-secret challenge"))));
  EXPECT_EQ(accept.state(), Handshaker::State::kFailed);
  // After its HELLO, CHALLENGE and PROOF, the refusal went out as ERROR.
  const size_t answer =
      kHelloFrameBytes + kChallengeFrameBytes + kProofFrameBytes;
  ASSERT_GT(out.size(), answer + kFrameHeaderBytes);
  ASSERT_OK_AND_ASSIGN(FrameHeader error,
                       DecodeFrameHeader(absl::MakeConstSpan(out).subspan(
                           answer, kFrameHeaderBytes)));
  EXPECT_EQ(error.type, FrameType::kError);
  EXPECT_EQ(error.imm,
            static_cast<uint32_t>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(out.size(), answer + kFrameHeaderBytes + error.length);
}

// Sends a HELLO claiming rank 2 and a CHALLENGE, then answers with `proof`
// (or, when null, with the accepting side's own proof reflected back).
absl::Status ForgeProof(const Proof* proof) {
  Handshaker accept(AcceptConfig("s3cret"));
  HandshakeConfig forger_config = ConnectConfig("s3cret");
  Handshaker forger(forger_config);  // only to produce HELLO and CHALLENGE
  std::vector<uint8_t> to_accept, to_forger;
  EXPECT_OK(forger.Start(&to_accept));
  EXPECT_OK(Feed(accept, to_accept, &to_forger));
  // The accepting side answered HELLO, CHALLENGE and its PROOF.
  EXPECT_EQ(to_forger.size(),
            kHelloFrameBytes + kChallengeFrameBytes + kProofFrameBytes);
  Proof answer;
  if (proof != nullptr) {
    answer = *proof;
  } else {
    std::copy(to_forger.end() - kProofBodyBytes, to_forger.end(),
              answer.begin());
  }
  uint8_t frame[kProofFrameBytes];
  EncodeProofFrame(answer, frame);
  std::vector<uint8_t> bytes(frame, frame + sizeof(frame));
  std::vector<uint8_t> out;
  absl::Status status = Feed(accept, bytes, &out);
  EXPECT_NE(accept.state(), Handshaker::State::kAuthenticated);
  return status;
}

TEST(Handshaker, ForgedProofIsRefused) {
  Proof zeros = {};
  EXPECT_THAT(ForgeProof(&zeros),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("claiming to be " + Name(2)),
                             HasSubstr("10.0.0.2:51234"))));
}

TEST(Handshaker, ReflectedProofIsRefused) {
  EXPECT_THAT(ForgeProof(nullptr),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("failed the cluster-secret challenge")));
}

TEST(Handshaker, GarbageIsDataLossAndEndsTheHandshake) {
  Handshaker accept(AcceptConfig("s3cret"));
  std::vector<uint8_t> garbage(200, 0x5a);
  std::vector<uint8_t> out;
  EXPECT_THAT(
      Feed(accept, garbage, &out),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("10.0.0.2:51234"), HasSubstr("bad magic"))));
  EXPECT_EQ(accept.state(), Handshaker::State::kFailed);
  EXPECT_EQ(accept.BytesWanted(), 0u);
  // Only one header was read.
  EXPECT_EQ(garbage.size(), 200 - kFrameHeaderBytes);
}

TEST(Handshaker, DataFrameBeforeTheHandshakeIsRefused) {
  Handshaker accept(AcceptConfig(""));
  FrameHeader write;
  write.type = FrameType::kWrite;
  write.part_count = 1;
  write.length = uint64_t{1} << 40;  // never allocated
  uint8_t header[kFrameHeaderBytes];
  EncodeFrameHeader(write, header);
  std::vector<uint8_t> bytes(header, header + sizeof(header));
  std::vector<uint8_t> out;
  EXPECT_THAT(Feed(accept, bytes, &out),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("sent WRITE instead of HELLO")));
}

TEST(Handshaker, PeerErrorEndsTheHandshakeWithItsCodeAndText) {
  Handshaker connect(ConnectConfig(""));
  std::vector<uint8_t> out;
  ASSERT_OK(connect.Start(&out));
  const std::string text = "group size mismatch\nsecond line";
  FrameHeader error;
  error.type = FrameType::kError;
  error.imm = static_cast<uint32_t>(absl::StatusCode::kFailedPrecondition);
  error.length = text.size();
  uint8_t header[kFrameHeaderBytes];
  EncodeFrameHeader(error, header);
  std::vector<uint8_t> bytes(header, header + sizeof(header));
  bytes.insert(bytes.end(), text.begin(), text.end());
  out.clear();
  EXPECT_THAT(Feed(connect, bytes, &out),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(Name(0) + " refused: group size"),
                             Not(HasSubstr("\n")))));
  EXPECT_TRUE(connect.refused_by_peer());
  EXPECT_TRUE(out.empty());  // no answer to a refusal
}

TEST(Handshaker, HelloMismatchIsRefusedWithBothSidesNamed) {
  HandshakeConfig connect = ConnectConfig("");
  connect.local.group_size = 4;
  Outcome outcome = Handshake(connect, AcceptConfig(""));
  EXPECT_THAT(outcome.accept, StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("group size mismatch")));
  EXPECT_THAT(outcome.connect,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(Name(0) + " refused"),
                             HasSubstr("group size mismatch"))));
}

TEST(Handshaker, RefuseSendsTheReason) {
  Handshaker connect(ConnectConfig(""));
  Handshaker accept(AcceptConfig(""));
  std::vector<uint8_t> to_accept, to_connect;
  ASSERT_OK(connect.Start(&to_accept));
  ASSERT_OK(Feed(accept, to_accept, &to_connect));
  ASSERT_EQ(accept.state(), Handshaker::State::kAuthenticated);
  accept.Refuse(absl::FailedPreconditionError("rank 2 is already connected"),
                &to_connect);
  EXPECT_EQ(accept.state(), Handshaker::State::kFailed);
  EXPECT_THAT(Feed(connect, to_connect, &to_accept),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already connected")));
}

}  // namespace
}  // namespace tcp
}  // namespace transport
}  // namespace starling
