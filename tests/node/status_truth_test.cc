// Status tells the truth within one heartbeat: a worker killed (-9) mid-run
// shows as MISSING in its node's worker list (the coordinator's JobStatus,
// `starlingctl status`, the coordinator's and the daemon's /metrics) within
// one heartbeat period plus slack; past --worker_grace the run shows FAILED
// with an error naming the worker, in `starlingctl status` and the metrics.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Worker `index` of rank `rank` as the coordinator last heard of it.
proto::WorkerStatus::State WorkerState(const proto::JobStatus& status, int rank,
                                       int index) {
  if (status.nodes_size() <= rank)
    return proto::WorkerStatus::STATE_UNSPECIFIED;
  for (const proto::WorkerStatus& w : status.nodes(rank).workers()) {
    if (w.index() == index) return w.state();
  }
  return proto::WorkerStatus::STATE_UNSPECIFIED;
}

TEST(StatusTruth,
     KilledWorkerShowsMissingWithinAHeartbeatThenTheRunFailedNamingIt) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 2;
  options.parameter_count = 100;
  options.heartbeat_timeout = absl::Seconds(2);
  options.worker_grace = absl::Seconds(3);
  options.collective_timeout = absl::Seconds(20);
  // Heartbeats every 400 ms (a fifth of the timeout).
  const absl::Duration heartbeat_period = options.heartbeat_timeout / 5;
  // Process scheduling, the poll and the RPCs on 2 busy cores.
  const absl::Duration slack = absl::Seconds(1);
  NodeCluster cluster(options);
  const int coordinator_metrics = PickLoopbackPort();
  cluster.StartCoordinatorWith(
      "coordinator", {absl::StrCat("--metrics_port=", coordinator_metrics)});
  cluster.StartDaemons();
  std::vector<pid_t> workers = cluster.StartAllWorkers(
      {"--steps=100000", "--step_delay=5ms", "--timeout=30s"});

  constexpr int kRank = 1, kIndex = 1;
  const int victim = kRank * options.local_workers + kIndex;
  proto::JobStatus status;
  std::string error;
  {
    // Mid-run: the coordinator hears of both workers of rank 1, attached.
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    bool running = false;
    while (!running && absl::Now() < deadline) {
      running = cluster.JobStatus(&status, &error) && status.iteration() >= 5 &&
                WorkerState(status, kRank, 0) ==
                    proto::WorkerStatus::STATE_ATTACHED &&
                WorkerState(status, kRank, kIndex) ==
                    proto::WorkerStatus::STATE_ATTACHED;
      if (!running) absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_TRUE(running) << status.DebugString() << cluster.ServerLogs();
  }
  EXPECT_EQ(Metric(coordinator_metrics, "starling_coordinator_workers",
                   {"rank=\"1\"", "state=\"attached\""}),
            2);
  EXPECT_EQ(
      Metric(cluster.metrics_port(kRank), "starling_node_attached_workers"), 2);

  const absl::Time killed = absl::Now();
  cluster.Kill(workers[victim], SIGKILL);
  // The coordinator's status shows it MISSING within one heartbeat.
  bool missing = false;
  while (!missing && absl::Now() < killed + absl::Seconds(10)) {
    missing = cluster.JobStatus(&status, &error) &&
              WorkerState(status, kRank, kIndex) ==
                  proto::WorkerStatus::STATE_MISSING;
    if (!missing) absl::SleepFor(absl::Milliseconds(20));
  }
  const absl::Duration seen = absl::Now() - killed;
  ASSERT_TRUE(missing) << status.DebugString() << cluster.ServerLogs();
  ::testing::Test::RecordProperty(
      "missing_seen_ms", static_cast<int>(absl::ToInt64Milliseconds(seen)));
  EXPECT_LT(seen, heartbeat_period + slack);
  // So do starlingctl and the metrics, as they read the same heartbeat.
  const coordinator::RunResult missing_view = cluster.CtlStatus();
  EXPECT_EQ(missing_view.exit_code, 0) << missing_view.output;
  EXPECT_THAT(missing_view.output, HasSubstr("MISSING")) << missing_view.output;
  EXPECT_THAT(missing_view.output, HasSubstr("grace left"))
      << missing_view.output;
  EXPECT_EQ(Metric(coordinator_metrics, "starling_coordinator_workers",
                   {"rank=\"1\"", "state=\"missing\""}),
            1);
  EXPECT_EQ(
      Metric(cluster.metrics_port(kRank), "starling_node_attached_workers"), 1);
  // The daemon's own metrics were set with the heartbeat that said so.
  EXPECT_EQ(
      Metric(cluster.metrics_port(kRank), "starling_node_missing_workers"), 1);
  EXPECT_EQ(Metric(cluster.metrics_port(0), "starling_node_missing_workers"),
            0);
  EXPECT_GE(Metric(cluster.metrics_port(kRank), "starling_node_run_id"), 1);
  (void)cluster.Wait(workers[victim], absl::Seconds(5));

  // Past the grace the run fails on every rank, naming the worker.
  for (size_t w = 0; w < workers.size(); ++w) {
    if (static_cast<int>(w) == victim) continue;
    const ProcessResult r = cluster.Wait(workers[w], absl::Seconds(15));
    ASSERT_FALSE(r.timed_out) << "worker " << w << " hung\n"
                              << cluster.ServerLogs();
    EXPECT_EQ(r.exit_code, 1) << "worker " << w << ": " << r.err;
  }
  const absl::Time failed = absl::Now();
  coordinator::RunResult failed_view;
  bool shown = false;
  while (!shown && absl::Now() < failed + absl::Seconds(10)) {
    failed_view = cluster.CtlStatus();
    shown = failed_view.output.find("FAILED") != std::string::npos;
    if (!shown) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(shown) << failed_view.output << cluster.ServerLogs();
  EXPECT_LT(absl::Now() - failed, heartbeat_period + slack)
      << failed_view.output;
  EXPECT_THAT(
      failed_view.output,
      AllOf(HasSubstr("index 1"), HasSubstr("rank 1"), HasSubstr("grace")))
      << failed_view.output;
  ASSERT_TRUE(cluster.JobStatus(&status, &error)) << error;
  ASSERT_GT(status.recent_runs_size(), 0) << status.DebugString();
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FAILED);
  EXPECT_THAT(status.recent_runs(0).error(), HasSubstr("index 1"));
  EXPECT_THAT(status.last_error(), HasSubstr("index 1"));

  // The metrics count the failed run and the failed steps.
  EXPECT_GE(Metric(coordinator_metrics, "starling_coordinator_runs_ended_total",
                   {"state=\"failed\""}),
            1);
  for (int d = 0; d < options.daemons; ++d) {
    EXPECT_GE(
        Metric(cluster.metrics_port(d), "starling_node_step_failures_total"), 1)
        << "daemon " << d;
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
