// Runs starlingctl, alone and against a real starling-coordinator process.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/version.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

std::string Ctl() { return RunfilePath("server/coordinator/starlingctl"); }

TEST(StarlingctlMain, UnreachableCoordinatorIsOneLineNamingAddressAndDeadline) {
  const int port = PickFreePort();  // nothing listens there
  const RunResult result = RunBinary(
      {Ctl(), "status", absl::StrCat("--coordinator=127.0.0.1:", port),
       "--timeout=2s"},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr(absl::StrCat("starlingctl: cannot reach the "
                                     "coordinator at 127.0.0.1:",
                                     port, " within 2s: ")));
}

// Port 99999 used to be accepted, then fail as unreachable.
TEST(StarlingctlMain, AnAddressThatIsNoneIsAUsageError) {
  for (const char* address : {"127.0.0.1:99999", "127.0.0.1:0", "nohost"}) {
    const RunResult result = RunBinary(
        {Ctl(), "status", absl::StrCat("--coordinator=", address)}, 20);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_EQ(CountLines(result.output), 1) << result.output;
    EXPECT_THAT(
        result.output,
        HasSubstr(absl::StrCat("starlingctl: --coordinator=", address, ": ")));
  }
}

// A gRPC server that is not a coordinator (a node's admin port) answered
// a bare "UNIMPLEMENTED: ": now starlingctl says what it reached.
TEST(StarlingctlMain, AServerThatIsNotACoordinatorIsNamed) {
  proto::NodeAdmin::Service admin;  // every method unimplemented
  grpc::ServerBuilder builder;
  builder.RegisterService(&admin);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> other = builder.BuildAndStart();
  ASSERT_NE(other, nullptr);
  ASSERT_GT(port, 0);
  const RunResult result = RunBinary(
      {Ctl(), "status", absl::StrCat("--coordinator=127.0.0.1:", port)}, 20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr(absl::StrCat("the server at 127.0.0.1:", port,
                                     " is not a Starling coordinator")));
  other->Shutdown();
}

TEST(StarlingctlMain, UnknownCommandIsAUsageError) {
  const RunResult result = RunBinary({Ctl(), "restart"}, 20);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_THAT(result.output, HasSubstr("unknown command 'restart'"));
}

// Starts starling-coordinator, forms a one-node group over gRPC, reads it
// back with starlingctl and /metrics, then stops it with SIGTERM.
TEST(StarlingctlMain, ShowsALiveJobThenTheCoordinatorStopsCleanly) {
  const int grpc_port = PickFreePort();
  const int metrics_port = PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", grpc_port);
  const std::string log_path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/coordinator.log");
  std::vector<std::string> args = {
      RunfilePath("server/coordinator/starling-coordinator"),
      absl::StrCat("--listen=", address),
      absl::StrCat("--metrics_port=", metrics_port),
      "--job_id=e2e",
      "--expected_nodes=1",
      "--parameter_count=1000"};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }

  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  const bool connected = channel->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  if (connected) {
    auto stub = proto::Coordinator::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    proto::JoinRequest join;
    join.set_job_id("e2e");
    join.set_hostname("only-node");
    join.set_data_address("127.0.0.1:1");
    join.set_version(kStarlingVersion);
    proto::JoinResponse response;
    EXPECT_TRUE(stub->Join(&context, join, &response).ok());

    // One run begins; the node reports its workers.
    grpc::ClientContext begin_context;
    begin_context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    proto::BeginRunRequest begin;
    begin.set_job_id("e2e");
    begin.set_local_workers(1);
    proto::TensorSpec* spec = begin.add_tensors();
    spec->set_name("w");
    spec->add_shape(1000);
    spec->set_dtype(proto::DATA_TYPE_FLOAT32);
    proto::BeginRunResponse run;
    EXPECT_TRUE(stub->BeginRun(&begin_context, begin, &run).ok());
    grpc::ClientContext beat_context;
    beat_context.set_deadline(
        absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    proto::HeartbeatRequest beat;
    beat.set_job_id("e2e");
    beat.set_group_epoch(response.group_epoch());
    beat.mutable_run()->set_run_id(run.run_id());
    beat.mutable_run()->set_state(proto::RunStatus::STATE_RUNNING);
    proto::WorkerStatus* worker = beat.add_workers();
    worker->set_name("trainer-0");
    worker->set_state(proto::WorkerStatus::STATE_ATTACHED);
    proto::HeartbeatResponse beat_response;
    EXPECT_TRUE(stub->Heartbeat(&beat_context, beat, &beat_response).ok());

    const RunResult status = RunBinary(
        {Ctl(), "status", absl::StrCat("--coordinator=", address)}, 20);
    EXPECT_EQ(status.exit_code, 0) << status.output;
    EXPECT_THAT(status.output,
                HasSubstr("job e2e: 1 of 1 nodes healthy, group epoch 1"));
    EXPECT_THAT(status.output, HasSubstr("0     only-node  127.0.0.1:1  "
                                         "HEALTHY  3.9 KiB"));
    EXPECT_THAT(status.output, HasSubstr("degraded: no"));
    EXPECT_THAT(status.output,
                HasSubstr("workers:\n  rank 0 (only-node): run 1 RUNNING, 0 "
                          "steps, 1 worker\n    0  trainer-0  ATTACHED"));
    EXPECT_THAT(status.output,
                HasSubstr("runs:\n  current: run 1 RUNNING, 0 steps, 1 "
                          "worker, 1000 parameters, for "));

    httplib::Client client("127.0.0.1", metrics_port);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(5, 0);
    httplib::Result metrics = client.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_THAT(metrics->body,
                HasSubstr("starling_coordinator_group_size 1\n"));
  }
  ::kill(pid, SIGTERM);
  int wait_status = 0;
  ASSERT_EQ(::waitpid(pid, &wait_status, 0), pid);
  std::ifstream log_file(log_path);
  std::stringstream log;
  log << log_file.rdbuf();
  ASSERT_TRUE(connected) << "coordinator did not come up; its log:\n"
                         << log.str();
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
      << log.str();
  EXPECT_THAT(log.str(), HasSubstr("formed a group of 1 nodes"));
  EXPECT_THAT(log.str(), HasSubstr("shutting down"));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
