// The coordinator with a cluster secret (--cluster_secret_file, the nodes'
// file): a process that does not know the secret can neither join nor
// speak for a member, and a member speaks only for itself. Real
// coordinator and daemons on loopback; the forgeries are the test's own
// gRPC calls, as an attacker on the same host would make them.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
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
#include "server/base/call_credential.h"
#include "tests/node/formation_strangers.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "control-plane-auth-test secret, 32+ bytes";

std::string SecretFile(const std::string& name, const std::string& secret) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "_", ::getpid());
  {
    std::ofstream out(path);
    out << secret;
  }
  EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
  return path;
}

// A call as an attacker (or a confused member) makes it: `host` and
// `address` claimed in the metadata and, with a `secret`, a fresh member
// credential for the call under it (or `fixed`, as given, if not empty).
class Caller {
 public:
  Caller(const std::string& target, std::string host, std::string address,
         std::string secret, std::string fixed = "")
      : stub_(proto::Coordinator::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        host_(std::move(host)),
        address_(std::move(address)),
        secret_(std::move(secret)),
        fixed_(std::move(fixed)) {}

  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, absl::string_view name,
                    const Request& request, Response* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    context.AddMetadata(kCallerHostKey, host_);
    context.AddMetadata(kCallerAddressKey, address_);
    last_credential_ = fixed_;
    if (fixed_.empty() && !secret_.empty()) {
      last_credential_ = SignCall(secret_, CallRole::kMember, name, "test",
                                  CallIdentity{host_, address_}, absl::Now())
                             .value_or("");
    }
    if (!last_credential_.empty()) {
      context.AddMetadata(kCallCredentialKey, last_credential_);
    }
    return (stub_.get()->*method)(&context, request, out);
  }
  const std::string& last_credential() const { return last_credential_; }

 private:
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  std::string host_, address_, secret_, fixed_, last_credential_;
};

TEST(ControlPlaneAuth, StrangersCannotJoinNorSpeakForAMember) {
  const std::string secret_file = SecretFile("secret", kSecret);
  const std::vector<std::string> secret = {
      absl::StrCat("--cluster_secret_file=", secret_file)};
  NodeCluster cluster(FormationOptions());
  cluster.set_operator_secret(kSecret);
  cluster.StartCoordinatorWith("coordinator", secret);
  cluster.StartDaemon(0, secret);
  cluster.StartDaemon(1, secret);
  ASSERT_TRUE(WaitForJoined(cluster, 2)) << cluster.ServerLogs();

  // A stranger's Join while the group forms: no credential, then one made
  // under another secret. Neither takes a slot.
  proto::JoinRequest join;
  join.set_job_id("test");
  join.set_hostname("stranger");
  join.set_data_address("127.0.0.1:1");
  join.set_version("");
  proto::JoinResponse joined;
  Caller bare(cluster.coordinator_address(), "stranger", "127.0.0.1:1", "");
  grpc::Status status =
      bare.Call(&proto::Coordinator::Stub::Join, "Join", join, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("Join from stranger (127.0.0.1:1) refused: it carries "
                        "no credential"));
  Caller wrong(cluster.coordinator_address(), "stranger", "127.0.0.1:1",
               "another secret, 16 bytes or more");
  status = wrong.Call(&proto::Coordinator::Stub::Join, "Join", join, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("member credential is not under this service's "
                        "secret"));

  cluster.StartDaemon(2, secret);
  ASSERT_TRUE(WaitForServing(cluster, absl::Seconds(20)))
      << cluster.ServerLogs();
  ExpectHealthyGroup(cluster);
  proto::JobStatus job;
  std::string error;
  ASSERT_TRUE(cluster.JobStatus(&job, &error)) << error;
  ASSERT_EQ(job.nodes_size(), 3);
  const proto::PeerInfo& one = job.nodes(1).peer();
  const proto::PeerInfo& zero = job.nodes(0).peer();

  // Forged calls for rank 1 by a caller that does not know the secret.
  Caller forger(cluster.coordinator_address(), one.hostname(),
                one.data_address(), "");
  proto::EndRunRequest end;
  end.set_job_id("test");
  end.set_rank(1);
  end.set_group_epoch(job.group_epoch());
  end.set_run_id(1);
  end.set_state(proto::RunStatus::STATE_FAILED);
  end.set_error("disk on fire");
  proto::EndRunResponse ended;
  status =
      forger.Call(&proto::Coordinator::Stub::EndRun, "EndRun", end, &ended);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  proto::HeartbeatRequest beat;
  beat.set_job_id("test");
  beat.set_rank(1);
  beat.set_group_epoch(job.group_epoch());
  proto::HeartbeatResponse answer;
  status = forger.Call(&proto::Coordinator::Stub::Heartbeat, "Heartbeat", beat,
                       &answer);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  proto::RejoinRequest rejoin;
  rejoin.mutable_node()->set_job_id("test");
  rejoin.mutable_node()->set_hostname(one.hostname());
  rejoin.mutable_node()->set_data_address(one.data_address());
  rejoin.mutable_node()->set_admin_address("127.0.0.1:2");
  rejoin.set_rank(1);
  rejoin.set_group_epoch(job.group_epoch());
  status =
      forger.Call(&proto::Coordinator::Stub::Rejoin, "Rejoin", rejoin, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("Rejoin from ", one.hostname(), " (",
                                     one.data_address(),
                                     ") refused: it carries no credential")));

  // An insider: a process that knows the cluster secret, claiming rank 0's
  // identity. The secret proves Join and Rejoin only; every other call of
  // a member is signed under the key the coordinator gave it at Join, so
  // the insider speaks neither for rank 1 nor for rank 0.
  Caller insider(cluster.coordinator_address(), zero.hostname(),
                 zero.data_address(), kSecret);
  status =
      insider.Call(&proto::Coordinator::Stub::EndRun, "EndRun", end, &ended);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("EndRun from ", zero.hostname())));
  EXPECT_THAT(status.error_message(),
              HasSubstr("signs its calls with the member key"));
  for (int rank : {1, 0}) {
    beat.set_rank(rank);
    for (uint64_t epoch : {job.group_epoch(), uint64_t{0}}) {
      beat.set_group_epoch(epoch);
      status = insider.Call(&proto::Coordinator::Stub::Heartbeat, "Heartbeat",
                            beat, &answer);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << "rank " << rank << " epoch " << epoch;
      EXPECT_THAT(status.error_message(),
                  HasSubstr("signs its calls with the member key"));
    }
  }
  // Its Rejoin in rank 0's name (the secret proves it) gets no key: a live
  // member keeps its own.
  proto::RejoinRequest again;
  *again.mutable_node() = rejoin.node();
  again.mutable_node()->set_hostname(zero.hostname());
  again.mutable_node()->set_data_address(zero.data_address());
  again.mutable_node()->set_admin_address(zero.admin_address());
  again.set_rank(0);
  again.set_group_epoch(job.group_epoch());
  for (const proto::NodeStatus& node : job.nodes()) {
    *again.add_peers() = node.peer();
  }
  status =
      insider.Call(&proto::Coordinator::Stub::Rejoin, "Rejoin", again, &joined);
  if (status.ok()) {
    EXPECT_TRUE(joined.member_key().empty());
  } else {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message();
  }

  // A credential seen on the wire is worth nothing: replayed, refused; and
  // one made for a Rejoin does not carry a run's end.
  Caller replay(cluster.coordinator_address(), zero.hostname(),
                zero.data_address(), "", insider.last_credential());
  status =
      replay.Call(&proto::Coordinator::Stub::Rejoin, "Rejoin", again, &joined);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("used before"));
  end.set_rank(0);
  status =
      replay.Call(&proto::Coordinator::Stub::EndRun, "EndRun", end, &ended);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Status and admin calls without an operator's credential get nothing,
  // from the coordinator or a daemon's admin service.
  cluster.set_operator_secret("");
  EXPECT_FALSE(cluster.JobStatus(&job, &error));
  EXPECT_THAT(error, HasSubstr("GetJobStatus from node-cluster-test refused: "
                               "it carries no credential"));
  proto::NodeStatusReply node_status;
  EXPECT_FALSE(cluster.NodeStatus(0, &node_status, &error));
  EXPECT_THAT(error, HasSubstr("NodeAdmin.GetStatus from node-cluster-test "
                               "refused: it carries no credential"));
  cluster.set_operator_secret("another secret, 16 bytes or more");
  EXPECT_FALSE(cluster.NodeStatus(0, &node_status, &error));
  EXPECT_THAT(error, HasSubstr("not under this service's secret"));
  cluster.set_operator_secret(kSecret);
  EXPECT_TRUE(cluster.NodeStatus(0, &node_status, &error)) << error;
  // starlingctl signs its calls with --secret_file: status and inflight
  // (which asks every daemon's admin service) answer; without it, the
  // coordinator's refusal says how to sign.
  for (const char* command : {"status", "inflight"}) {
    const coordinator::RunResult signed_call = coordinator::RunBinary(
        {BinaryPath("server/coordinator/starlingctl"), command,
         absl::StrCat("--coordinator=", cluster.coordinator_address()),
         "--timeout=5s", absl::StrCat("--secret_file=", secret_file)},
        20);
    EXPECT_EQ(signed_call.exit_code, 0) << signed_call.output;
    EXPECT_THAT(signed_call.output, HasSubstr("node1")) << command;
  }
  const coordinator::RunResult unsigned_call = coordinator::RunBinary(
      {BinaryPath("server/coordinator/starlingctl"), "status",
       absl::StrCat("--coordinator=", cluster.coordinator_address()),
       "--timeout=5s"},
      20);
  EXPECT_EQ(unsigned_call.exit_code, 1) << unsigned_call.output;
  EXPECT_THAT(unsigned_call.output,
              HasSubstr("(starlingctl --secret_file signs the calls)"));

  // None of it reached the job: the group is whole and trains.
  ASSERT_TRUE(cluster.JobStatus(&job, &error)) << error;
  EXPECT_THAT(job.last_error(), Not(HasSubstr("disk on fire")));
  ExpectHealthyGroup(cluster);
  ExpectTrainingBitIdentical(cluster, {"--steps=20", "--timeout=20s"},
                             absl::Seconds(30));
  EXPECT_THAT(cluster.ServerLogs(), HasSubstr("refused: EndRun"));
}

TEST(ControlPlaneAuth, ANodeWithoutTheSecretIsToldWhy) {
  NodeCluster cluster(FormationOptions());
  cluster.StartCoordinatorWith(
      "coordinator",
      {absl::StrCat("--cluster_secret_file=", SecretFile("only", kSecret))});
  const pid_t node = cluster.StartDaemon(0, {});
  const ProcessResult result = cluster.Wait(node, absl::Seconds(30));
  ASSERT_FALSE(result.timed_out) << cluster.ServerLogs();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.err,
              HasSubstr("it carries no credential; this coordinator runs "
                        "with a cluster secret: start the node with "
                        "--cluster_secret_file"));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
