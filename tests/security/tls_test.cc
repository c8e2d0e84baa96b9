// The control plane over mutual TLS, with a CA the test makes itself: the
// coordinator, the daemons and starlingctl each show a certificate of the
// CA and verify the other side's, the group forms and trains bit for bit,
// and whoever has no certificate of that CA (a plaintext client, a TLS
// client without a certificate or with another CA's, a node without one)
// gets nothing from either service.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/grpc_server.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/node_cluster.h"
#include "tests/security/test_certificates.h"

namespace starling {
namespace testing_security {
namespace {

using ::starling::coordinator::RunBinary;
using ::starling::coordinator::RunfilePath;
using ::starling::coordinator::RunResult;
using ::starling::testing_node::ClusterOptions;
using ::starling::testing_node::NodeCluster;
using ::testing::HasSubstr;

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tls_", ::getpid());
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

std::vector<std::string> TlsFlags(const IssuedFiles& mine,
                                  const std::string& ca_file) {
  return {absl::StrCat("--tls_cert_file=", mine.cert_file),
          absl::StrCat("--tls_key_file=", mine.key_file),
          absl::StrCat("--tls_ca_file=", ca_file)};
}

std::shared_ptr<grpc::ChannelCredentials> Credentials(const TlsFiles& tls) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(tls);
  EXPECT_TRUE(credentials.ok()) << credentials.status();
  return credentials.value_or(nullptr);
}

// GetJobStatus over `credentials`, due in 3 s.
grpc::Status AskStatus(const std::string& address,
                       std::shared_ptr<grpc::ChannelCredentials> credentials) {
  auto stub = proto::Coordinator::NewStub(
      grpc::CreateChannel(address, std::move(credentials)));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(3)));
  proto::JobStatus status;
  return stub->GetJobStatus(&context, proto::GetJobStatusRequest(), &status);
}

ClusterOptions TwoDaemons() {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 1;
  return options;
}

TEST(MutualTls, OnlyHoldersOfTheCasCertificatesReachTheControlPlane) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<TestCertificateAuthority>> ca =
      TestCertificateAuthority::Create(dir, "cluster");
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<std::unique_ptr<TestCertificateAuthority>> other =
      TestCertificateAuthority::Create(dir, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string local = "IP:127.0.0.1,DNS:localhost";
  absl::StatusOr<IssuedFiles> coordinator = (*ca)->Issue("coordinator", local);
  absl::StatusOr<IssuedFiles> node0 = (*ca)->Issue("node0", local);
  absl::StatusOr<IssuedFiles> node1 = (*ca)->Issue("node1", local);
  absl::StatusOr<IssuedFiles> operator_files = (*ca)->Issue("operator", local);
  absl::StatusOr<IssuedFiles> stranger = (*other)->Issue("stranger", local);
  for (const auto* issued :
       {&coordinator, &node0, &node1, &operator_files, &stranger}) {
    ASSERT_TRUE(issued->ok()) << issued->status();
  }
  const std::string& ca_file = (*ca)->ca_file();
  const TlsFiles operator_tls{operator_files->cert_file,
                              operator_files->key_file, ca_file};

  NodeCluster cluster(TwoDaemons());
  cluster.set_channel_credentials(Credentials(operator_tls));
  cluster.StartCoordinatorWith("coordinator", TlsFlags(*coordinator, ca_file));
  cluster.StartDaemon(0, TlsFlags(*node0, ca_file));
  cluster.StartDaemon(1, TlsFlags(*node1, ca_file));
  proto::JobStatus job;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) {
        return s.nodes_size() == 2 && s.group_epoch() > 0;
      },
      &job))
      << cluster.ServerLogs();
  testing_node::ExpectTrainingBitIdentical(
      cluster, {"--steps=20", "--timeout=20s"}, absl::Seconds(30));

  const std::string address = cluster.coordinator_address();
  // A plaintext client, a TLS client without a certificate, one with
  // another CA's certificate: none gets the job's status.
  EXPECT_FALSE(AskStatus(address, grpc::InsecureChannelCredentials()).ok());
  EXPECT_FALSE(AskStatus(address, Credentials(TlsFiles{"", "", ca_file})).ok());
  EXPECT_FALSE(
      AskStatus(address, Credentials(TlsFiles{stranger->cert_file,
                                              stranger->key_file, ca_file}))
          .ok());
  EXPECT_TRUE(AskStatus(address, Credentials(operator_tls)).ok());
  // The daemons' admin services alike.
  proto::NodeStatusReply node_status;
  std::string error;
  EXPECT_TRUE(cluster.NodeStatus(0, &node_status, &error)) << error;
  cluster.set_channel_credentials(grpc::InsecureChannelCredentials());
  proto::GroupReply group;
  EXPECT_FALSE(cluster.NodeGroup(1, &group, &error));

  // starlingctl with the operator's certificate shows the group; without
  // one it says what it could not reach.
  const RunResult shown =
      RunBinary({RunfilePath("server/coordinator/starlingctl"), "status",
                 absl::StrCat("--coordinator=", address), "--timeout=5s",
                 absl::StrCat("--tls_ca_file=", ca_file),
                 absl::StrCat("--tls_cert_file=", operator_files->cert_file),
                 absl::StrCat("--tls_key_file=", operator_files->key_file)},
                20);
  EXPECT_EQ(shown.exit_code, 0) << shown.output;
  EXPECT_THAT(shown.output, HasSubstr("node0"));
  const RunResult refused =
      RunBinary({RunfilePath("server/coordinator/starlingctl"), "status",
                 absl::StrCat("--coordinator=", address), "--timeout=2s",
                 absl::StrCat("--tls_ca_file=", ca_file)},
                20);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("coordinator at"));
}

// A node with the CA but no certificate of its own cannot join a
// coordinator that requires one: it gives up at its --timeout, saying it
// could not reach the coordinator. A node with another node's certificate
// is refused at once, naming the host the certificate is for: a node
// speaks only for its own certificate. The group never counts either.
TEST(MutualTls, ANodeWithoutItsOwnCertificateCannotJoin) {
  const std::string dir = TempDir();
  absl::StatusOr<std::unique_ptr<TestCertificateAuthority>> ca =
      TestCertificateAuthority::Create(dir, "lonely");
  ASSERT_TRUE(ca.ok()) << ca.status();
  absl::StatusOr<IssuedFiles> coordinator =
      (*ca)->Issue("lonely-coordinator", "IP:127.0.0.1");
  absl::StatusOr<IssuedFiles> operator_files =
      (*ca)->Issue("lonely-operator", "IP:127.0.0.1");
  absl::StatusOr<IssuedFiles> node0 = (*ca)->Issue("node0", "IP:127.0.0.1");
  ASSERT_TRUE(coordinator.ok() && operator_files.ok() && node0.ok());
  const std::string& ca_file = (*ca)->ca_file();
  NodeCluster cluster(TwoDaemons());
  cluster.set_channel_credentials(Credentials(
      {operator_files->cert_file, operator_files->key_file, ca_file}));
  cluster.StartCoordinatorWith("coordinator", TlsFlags(*coordinator, ca_file));
  const pid_t bare = cluster.StartDaemon(
      0, {absl::StrCat("--tls_ca_file=", ca_file), "--timeout=3s"});
  // Daemon 1 (--hostname=node1) with node 0's certificate.
  std::vector<std::string> borrowed = TlsFlags(*node0, ca_file);
  borrowed.push_back("--timeout=10s");
  const pid_t impostor = cluster.StartDaemon(1, borrowed);
  const testing_node::ProcessResult refused =
      cluster.Wait(impostor, absl::Seconds(30));
  ASSERT_FALSE(refused.timed_out) << cluster.ServerLogs();
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err, HasSubstr("Join from node1 (127.0.0.1:"));
  EXPECT_THAT(refused.err,
              HasSubstr("refused: its client certificate names [node0, "));
  const testing_node::ProcessResult result =
      cluster.Wait(bare, absl::Seconds(30));
  ASSERT_FALSE(result.timed_out) << cluster.ServerLogs();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err, HasSubstr("coordinator"));
  proto::JobStatus job;
  std::string error;
  ASSERT_TRUE(cluster.JobStatus(&job, &error)) << error;
  EXPECT_EQ(job.nodes_size(), 0);
}

}  // namespace
}  // namespace testing_security
}  // namespace starling
