// Formation a stranger cannot break, with real daemons: while three
// starling-node daemons form a group, strangers hold connections to the
// data ports of ranks 0 and 1 (idle, garbage, a HELLO claiming rank 2).
// The group still forms within a few seconds (a stranger's 5 s handshake
// deadline delays no one), every node stays healthy, the real rank 2 is in
// the group, and a short training run ends bit-identical on every worker.
// With a cluster secret, a HELLO claiming rank 2 that goes through with a
// proof made without the secret is refused, and the daemon logs it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/transport/auth.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"
#include "tests/node/formation_strangers.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using transport::AuthMode;

TEST(FormationStranger, IdleGarbageAndHalfHelloDelayNoOneAndMarkNoOneLost) {
  NodeCluster cluster(FormationOptions());
  cluster.StartCoordinator();
  cluster.StartDaemon(0, {});
  cluster.StartDaemon(1, {});
  ASSERT_TRUE(WaitForJoined(cluster, 2)) << cluster.ServerLogs();

  // Before the group forms: strangers at ranks 0 and 1.
  Stranger idle0(cluster.data_port(0)), idle1(cluster.data_port(1));
  Stranger garbage(cluster.data_port(0));
  Stranger half0(cluster.data_port(0)), half1(cluster.data_port(1));
  for (Stranger* s : {&idle0, &idle1, &garbage, &half0, &half1}) {
    ASSERT_TRUE(s->connected());
  }
  ASSERT_TRUE(garbage.Send(Garbage()));
  // A HELLO claiming rank 2, then nothing more.
  std::vector<uint8_t> hello =
      ForgedOpening(2, 0, kFormationDaemons, AuthMode::kNone, nullptr);
  hello.resize(transport::kHelloFrameBytes);
  ASSERT_TRUE(half0.Send(hello));
  hello = ForgedOpening(2, 1, kFormationDaemons, AuthMode::kNone, nullptr);
  hello.resize(transport::kHelloFrameBytes);
  ASSERT_TRUE(half1.Send(hello));

  const absl::Time start = absl::Now();
  cluster.StartDaemon(2, {});
  ASSERT_TRUE(WaitForServing(cluster, absl::Seconds(15)))
      << cluster.ServerLogs();
  const absl::Duration formed = absl::Now() - start;
  ::testing::Test::RecordProperty(
      "formation_ms", static_cast<int>(absl::ToInt64Milliseconds(formed)));
  EXPECT_LT(formed, kFormationBound) << cluster.ServerLogs();

  ExpectHealthyGroup(cluster);
  ExpectTrainingBitIdentical(cluster, {"--steps=20", "--timeout=20s"},
                             absl::Seconds(30));
  // The strangers' handshake deadlines (5 s) have passed by now for some;
  // no node was marked lost meanwhile.
  ExpectHealthyGroup(cluster);

  // The garbage was refused with an ERROR frame (DataLoss).
  std::vector<uint8_t> header;
  ASSERT_TRUE(garbage.Receive(transport::kFrameHeaderBytes, &header));
  absl::StatusOr<transport::FrameHeader> refusal =
      transport::DecodeFrameHeader(header);
  ASSERT_TRUE(refusal.ok()) << refusal.status();
  EXPECT_EQ(refusal->type, transport::FrameType::kError);
  EXPECT_EQ(refusal->imm, static_cast<uint32_t>(absl::StatusCode::kDataLoss));
}

TEST(FormationStranger, ForgedHelloWithoutTheSecretIsRefusedAndLogged) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string secret_file = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                               "/cluster_secret_", ::getpid());
  {
    std::ofstream out(secret_file);
    out << "formation-stranger-test secret";
  }
  ASSERT_EQ(::chmod(secret_file.c_str(), 0600), 0);
  const std::vector<std::string> secret = {
      absl::StrCat("--cluster_secret_file=", secret_file)};

  NodeCluster cluster(FormationOptions());
  // The daemons' admin services take operators' calls under the secret.
  cluster.set_operator_secret("formation-stranger-test secret");
  cluster.StartCoordinator();
  cluster.StartDaemon(0, secret);
  cluster.StartDaemon(1, secret);
  ASSERT_TRUE(WaitForJoined(cluster, 2)) << cluster.ServerLogs();

  Stranger idle0(cluster.data_port(0));
  Stranger garbage(cluster.data_port(1));
  Stranger forged0(cluster.data_port(0)), forged1(cluster.data_port(1));
  for (Stranger* s : {&idle0, &garbage, &forged0, &forged1}) {
    ASSERT_TRUE(s->connected());
  }
  ASSERT_TRUE(garbage.Send(Garbage()));
  // At rank 0 the forger goes through at once: HELLO, CHALLENGE and a
  // PROOF made under another secret, all sent before the group forms, so
  // that rank 0 judges the proof as soon as it serves the connection (a
  // handshake still pending when the mesh has formed is closed unjudged).
  // Rank 0's nonce is not known yet; a proof without the secret is wrong
  // whatever it covers.
  transport::Transcript transcript;
  std::vector<uint8_t> forgery = ForgedOpening(
      2, 0, kFormationDaemons, AuthMode::kHmacSha256, &transcript);
  uint8_t proof[transport::kProofFrameBytes];
  transport::EncodeProofFrame(
      transport::ComputeProof("a guess", transport::ProofRole::kConnect,
                              transcript),
      proof);
  forgery.insert(forgery.end(), proof, proof + sizeof(proof));
  ASSERT_TRUE(forged0.Send(forgery));
  // At rank 1 the forger claims rank 2 and falls silent.
  ASSERT_TRUE(forged1.Send(
      ForgedOpening(2, 1, kFormationDaemons, AuthMode::kHmacSha256, nullptr)));

  const absl::Time start = absl::Now();
  cluster.StartDaemon(2, secret);
  const bool serving = WaitForServing(cluster, absl::Seconds(15));
  const absl::Duration formed = absl::Now() - start;
  ASSERT_TRUE(serving) << cluster.ServerLogs();
  ::testing::Test::RecordProperty(
      "formation_ms", static_cast<int>(absl::ToInt64Milliseconds(formed)));
  EXPECT_LT(formed, kFormationBound) << cluster.ServerLogs();

  // Rank 0 answered the opening (HELLO, CHALLENGE, its PROOF), then
  // refused the forged proof with ERROR (Unauthenticated).
  std::vector<uint8_t> answer;
  ASSERT_TRUE(forged0.Receive(transport::kHelloFrameBytes +
                                  transport::kChallengeFrameBytes +
                                  transport::kProofFrameBytes,
                              &answer))
      << "rank 0 did not answer the forged opening";
  std::vector<uint8_t> header;
  ASSERT_TRUE(forged0.Receive(transport::kFrameHeaderBytes, &header))
      << "rank 0 closed without refusing the forged proof";
  absl::StatusOr<transport::FrameHeader> refusal =
      transport::DecodeFrameHeader(header);
  ASSERT_TRUE(refusal.ok()) << refusal.status();
  const bool refused = refusal->type == transport::FrameType::kError;
  const uint32_t refusal_code = refusal->imm;
  EXPECT_TRUE(refused) << "rank 0 did not answer the forged proof with ERROR";
  EXPECT_EQ(refusal_code,
            static_cast<uint32_t>(absl::StatusCode::kUnauthenticated));
  // Rank 0 logged the refusal, with where it came from and whom it claimed.
  EXPECT_THAT(
      cluster.Stderr(cluster.daemon_pid(0)),
      AllOf(HasSubstr(absl::StrCat("rank 0 (127.0.0.1:", cluster.data_port(0),
                                   ") refused a connection from "
                                   "127.0.0.1:")),
            HasSubstr(absl::StrCat("claiming to be rank 2 (127.0.0.1:",
                                   cluster.data_port(2), ")")),
            HasSubstr("failed the cluster-secret challenge")));

  ExpectHealthyGroup(cluster);
  ExpectTrainingBitIdentical(cluster, {"--steps=20", "--timeout=20s"},
                             absl::Seconds(30));
  ExpectHealthyGroup(cluster);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
