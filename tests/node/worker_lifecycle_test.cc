// The node daemon as a long-running service, on loopback with real
// processes (coordinator, starling-node daemons, quadratic_worker):
//   - a worker that attaches and leaves before training changes nothing;
//   - runs follow one another on the same daemons (job after job), with
//     new tensors each time;
//   - a worker killed mid-run and restarted with the same index resumes,
//     and every worker ends bit-identical to an uninterrupted run;
//   - a worker killed and not replaced fails the run on every rank within
//     the grace, with an error naming it, and status shows it.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The "params=" part of a worker's output line (the parameters' bits).
std::string Params(const std::string& out) {
  const size_t at = out.find("params=");
  if (at == std::string::npos) return "";
  return out.substr(at, out.find('\n', at) - at);
}

// Runs every worker to the end; returns their output lines.
std::vector<ProcessResult> RunAll(NodeCluster& cluster,
                                  const std::vector<std::string>& flags) {
  std::vector<pid_t> pids = cluster.StartAllWorkers(flags);
  std::vector<ProcessResult> results;
  for (pid_t pid : pids) {
    results.push_back(cluster.Wait(pid, absl::Seconds(60)));
  }
  return results;
}

TEST(WorkerLifecycle, ProbeThatLeavesBeforeTrainingChangesNothing) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 1;
  options.parameter_count = 100;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  {
    // A probe takes index 0 on daemon 0, declares, and goes away.
    client::ClientOptions probe;
    probe.socket_path = cluster.socket_path(0);
    probe.worker_index = 0;
    probe.worker_name = "probe";
    probe.pool_bytes = 1 << 16;
    probe.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Connect(probe);
    ASSERT_TRUE(c.ok()) << c.status() << cluster.ServerLogs();
    ASSERT_TRUE(
        (*c)->DeclareTensor("junk", {3}, client::DataType::kFloat32).ok());
  }
  std::vector<ProcessResult> results = RunAll(cluster, {"--steps=20"});
  for (size_t w = 0; w < results.size(); ++w) {
    EXPECT_EQ(results[w].exit_code, 0)
        << "worker " << w << ": " << results[w].err << cluster.ServerLogs();
    EXPECT_EQ(Params(results[w].out), Params(results[0].out));
  }
}

TEST(WorkerLifecycle, RunsFollowOneAnotherOnTheSameDaemons) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 2;
  options.parameter_count = 300;
  options.fix_parameter_count = false;  // each run declares its own size
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  for (int dim : {300, 77, 300}) {
    std::vector<ProcessResult> results =
        RunAll(cluster, {"--steps=10", absl::StrCat("--dim=", dim)});
    for (size_t w = 0; w < results.size(); ++w) {
      ASSERT_EQ(results[w].exit_code, 0)
          << "dim " << dim << ", worker " << w << ": " << results[w].err
          << cluster.ServerLogs();
      EXPECT_EQ(Params(results[w].out), Params(results[0].out));
    }
  }
  // The daemon lists the runs, newest first, all finished.
  proto::NodeStatusReply status;
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) { return s.recent_runs_size() >= 3; },
      &status))
      << status.DebugString();
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
  EXPECT_EQ(status.recent_runs(1).parameter_count(), 77u);
  EXPECT_GT(status.recent_runs(0).run_id(), status.recent_runs(1).run_id());
}

TEST(WorkerLifecycle, KilledWorkerIsReplacedAndEveryWorkerEndsBitIdentical) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 2;
  options.parameter_count = 500;
  options.collective_timeout = absl::Seconds(20);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<std::string> flags = {"--steps=150", "--step_delay=10ms",
                                          "--timeout=60s"};

  // The reference: the same run, uninterrupted, on the same daemons.
  std::vector<ProcessResult> reference = RunAll(cluster, flags);
  for (const ProcessResult& r : reference) {
    ASSERT_EQ(r.exit_code, 0) << r.err << cluster.ServerLogs();
  }
  const std::string expected = Params(reference[0].out);
  ASSERT_THAT(expected, StartsWith("params="));

  std::vector<pid_t> pids = cluster.StartAllWorkers(flags);
  // Mid-run: kill worker 1 of daemon 1 once daemon 0 applied some steps.
  proto::NodeStatusReply status;
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) { return s.iteration() >= 20; },
      &status))
      << cluster.ServerLogs();
  const int victim = 1 * options.local_workers + 1;
  cluster.Kill(pids[victim], SIGKILL);
  ProcessResult killed = cluster.Wait(pids[victim], absl::Seconds(10));
  EXPECT_EQ(killed.exit_code, -1);
  // Status shows the missing worker while its slot waits.
  ASSERT_TRUE(cluster.WaitForNode(
      1, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) {
        for (const proto::WorkerStatus& w : s.workers()) {
          if (w.index() == 1 && w.state() == proto::WorkerStatus::STATE_MISSING)
            return true;
        }
        return false;
      },
      &status))
      << status.DebugString();
  pids[victim] = cluster.StartWorker(1, 1, flags);
  for (size_t w = 0; w < pids.size(); ++w) {
    ProcessResult result = cluster.Wait(pids[w], absl::Seconds(90));
    ASSERT_EQ(result.exit_code, 0)
        << "worker " << w << ": " << result.err << cluster.ServerLogs();
    EXPECT_EQ(Params(result.out), expected) << "worker " << w;
  }
  cluster.ExpectPeerTransports(cluster.options().daemons);
}

TEST(WorkerLifecycle, MissingWorkerPastTheGraceFailsEveryRankNamingIt) {
  ClusterOptions options;
  options.daemons = 3;
  options.local_workers = 2;
  options.parameter_count = 200;
  options.worker_grace = absl::Seconds(2);
  options.collective_timeout = absl::Seconds(30);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<pid_t> pids = cluster.StartAllWorkers(
      {"--steps=100000", "--step_delay=5ms", "--timeout=60s"});
  proto::NodeStatusReply status;
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) { return s.iteration() >= 5; },
      &status))
      << cluster.ServerLogs();
  const int victim = 2 * options.local_workers + 0;  // daemon 2, index 0
  const absl::Time killed = absl::Now();
  cluster.Kill(pids[victim], SIGKILL);
  for (size_t w = 0; w < pids.size(); ++w) {
    if (static_cast<int>(w) == victim) continue;
    ProcessResult result = cluster.Wait(pids[w], absl::Seconds(20));
    ASSERT_FALSE(result.timed_out) << "worker " << w << " hung\n"
                                   << cluster.ServerLogs();
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_THAT(result.err, AllOf(HasSubstr("index 0"), HasSubstr("rank 2"),
                                  HasSubstr("grace")))
        << "worker " << w;
  }
  // The grace (2 s) plus slack for 2 busy cores; far below the collective
  // timeout (30 s) that used to be the only bound.
  EXPECT_LT(absl::Now() - killed, absl::Seconds(12));
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) {
        return s.recent_runs_size() > 0 &&
               s.recent_runs(0).state() == proto::RunStatus::STATE_FAILED;
      },
      &status))
      << status.DebugString();
  EXPECT_THAT(status.recent_runs(0).error(), HasSubstr("index 0"));
  EXPECT_THAT(status.last_error(), HasSubstr("index 0"));

  // The daemons serve the next run.
  std::vector<ProcessResult> next = RunAll(cluster, {"--steps=10"});
  for (size_t w = 0; w < next.size(); ++w) {
    EXPECT_EQ(next[w].exit_code, 0)
        << "worker " << w << ": " << next[w].err << cluster.ServerLogs();
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
