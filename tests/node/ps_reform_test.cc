// A node lost, a node back, in the shard owners' modes: every owner's
// update is applied on its buddy's replica before the push returns, so a
// daemon killed -9 mid-run takes nothing acknowledged with it. The
// survivors re-form, take the lost shard from its buddy (checking the
// replicas of the owners that survive against them, bit for bit), re-cut
// the shards for the new group and go on; their workers rejoin, each at its
// own next step, and the run converges and finishes. A daemon restarted with
// the same flags is taken back into the running run and gets its new shard.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/reform_util.h"
#include "tests/node/test_params.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kDaemons = 3;
constexpr int kVictim = 1;
constexpr int kDim = 1000;
constexpr double kTolerance = 1e-3;

ClusterOptions Options() {
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = 1;
  options.parameter_count = kDim;
  options.mode = "parameter_server";
  options.optimizer = "momentum";
  options.learning_rate = 0.05;
  options.heartbeat_timeout = absl::Seconds(2);
  options.collective_timeout = absl::Seconds(10);
  return options;
}

std::vector<std::string> WorkerFlags(int64_t steps) {
  return {absl::StrCat("--steps=", steps), "--homogeneous", "--step_delay=2ms",
          "--timeout=20s"};
}

// Worker `pid` of daemon `d` exits 0 (not hung) at the optimum, with the
// parameters of the first worker waited for (`*params`).
ProcessResult WaitConverged(NodeCluster& cluster, pid_t pid, int d,
                            std::string* params) {
  const ProcessResult r = cluster.Wait(pid, absl::Seconds(90));
  EXPECT_FALSE(r.timed_out) << "worker of daemon " << d << " hung\n"
                            << cluster.ServerLogs();
  EXPECT_EQ(r.exit_code, 0)
      << "daemon " << d << ": " << r.err << cluster.ServerLogs();
  const std::vector<float> x = ParamsOf(r.out);
  EXPECT_EQ(x.size(), static_cast<size_t>(kDim)) << r.out;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max<double>(
        worst, std::abs(x[i] - examples::QuadraticB(static_cast<int>(i))));
  }
  EXPECT_LT(worst, kTolerance) << "daemon " << d;
  // After the last barrier every worker pulls the same values.
  const size_t at = r.out.find("params=");
  const std::string mine =
      at == std::string::npos ? std::string() : r.out.substr(at);
  if (params->empty()) *params = mine;
  EXPECT_EQ(mine, *params) << "daemon " << d;
  return r;
}

// Each survivor's worker was told it rejoined, at its own next step, with
// nothing rolled back.
void ExpectRejoinedAtItsOwnStep(const ProcessResult& r, int size) {
  EXPECT_THAT(r.err, HasSubstr("rejoined run 1 at step")) << r.err;
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(" of ", size,
                                            "; 0 pushed step(s) "
                                            "rolled back")))
      << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("ACKNOWLEDGED UPDATES LOST"))) << r.err;
}

// What a daemon that carried the run logged of the move: the lost shard
// from its buddy, and no replica that differs from its owner.
void ExpectShardMovedFromItsBuddy(NodeCluster& cluster, int d) {
  const std::string log = cluster.Stderr(cluster.daemon_pid(d));
  EXPECT_THAT(log, HasSubstr("shards moved (old rank(s) 1 from their buddies"))
      << log;
  EXPECT_THAT(log, HasSubstr(", 0 differing;")) << log;
  EXPECT_THAT(log, Not(HasSubstr("differs from its surviving owner"))) << log;
}

void ExpectRunFinished(NodeCluster& cluster, int group_size) {
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [group_size](const proto::JobStatus& s) {
        return s.recent_runs_size() >= 1 && s.group_size() == group_size;
      },
      &status))
      << cluster.ServerLogs();
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED)
      << status.recent_runs(0).error();
}

TEST(PsReform, ADaemonKilledMidRunTheRunGoesOnAtNMinus1) {
  NodeCluster cluster(Options());
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers =
      StartTraining(cluster, WorkerFlags(600), 5);
  KillDaemonAndItsWorker(cluster, workers, kVictim);
  std::string params;
  for (int d : {0, 2}) {
    const ProcessResult r = WaitConverged(cluster, workers[d], d, &params);
    ExpectRejoinedAtItsOwnStep(r, 2);
    ExpectShardMovedFromItsBuddy(cluster, d);
  }
  ExpectRunFinished(cluster, kDaemons - 1);
}

TEST(PsReform, ADaemonRestartedMidRunIsTakenBackIntoTheRun) {
  NodeCluster cluster(Options());
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<std::string> flags = WorkerFlags(1200);
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  KillDaemonAndItsWorker(cluster, workers, kVictim);
  cluster.StartDaemon(kVictim, {});
  proto::JobStatus status;
  ASSERT_TRUE(TakenBackIntoRun1(cluster, kVictim, &status));
  workers[kVictim] = cluster.StartWorker(kVictim, 0, flags);
  std::string params;
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = WaitConverged(cluster, workers[d], d, &params);
    if (d != kVictim) ExpectRejoinedAtItsOwnStep(r, kDaemons);
  }
  // The restarted daemon got its shard from the survivors' move.
  EXPECT_THAT(cluster.Stderr(cluster.daemon_pid(kVictim)),
              HasSubstr("daemon(s) joining)"));
  ExpectRunFinished(cluster, kDaemons);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
