// Optimizer state exists once per cluster, split N ways (DESIGN.md step 4):
// with Adam (2 floats of state per element) over 1001 parameters on 4
// daemons, each daemon's admin status reports the state of its own shard
// only, the shards add up to one replicated optimizer's state, and no
// daemon holds more than ceil(1/N) of it. The coordinator's job status
// (from heartbeats, what starlingctl status prints) shows the same figures.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

constexpr int kDaemons = 4;
constexpr uint64_t kParameters = 1001;
constexpr uint64_t kAdamStateBytesPerElement = 2 * sizeof(float);

TEST(OptimizerState, EachDaemonHoldsOneNthOfAReplicatedOptimizer) {
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = 1;
  options.parameter_count = kParameters;
  options.optimizer = "adam";
  options.worker_grace = absl::Seconds(1);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  // A run's optimizer state exists while the run does.
  const std::vector<pid_t> workers =
      cluster.StartAllWorkers({"--steps=100000", "--step_delay=5ms"});
  const absl::Time running_deadline = absl::Now() + absl::Seconds(20);
  for (int d = 0; d < kDaemons; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    while (!(cluster.NodeStatus(d, &status, &error) &&
             status.run().state() == proto::RunStatus::STATE_RUNNING) &&
           absl::Now() < running_deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_EQ(status.run().state(), proto::RunStatus::STATE_RUNNING)
        << "daemon " << d << ": " << error << cluster.ServerLogs();
  }

  const uint64_t replicated = kParameters * kAdamStateBytesPerElement;
  const uint64_t largest_share =
      (kParameters + kDaemons - 1) / kDaemons * kAdamStateBytesPerElement;
  uint64_t total = 0;
  for (int d = 0; d < kDaemons; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    ASSERT_TRUE(cluster.NodeStatus(d, &status, &error))
        << error << cluster.ServerLogs();
    EXPECT_EQ(status.rank(), d);
    EXPECT_LE(status.optimizer_state_bytes(), largest_share);
    EXPECT_GE(status.optimizer_state_bytes(),
              kParameters / kDaemons * kAdamStateBytesPerElement);
    EXPECT_EQ(status.optimizer_state_bytes(),
              status.shard_bytes() / sizeof(float) * kAdamStateBytesPerElement);
    total += status.optimizer_state_bytes();
  }
  EXPECT_EQ(total, replicated);

  // The coordinator's view, from the daemons' heartbeats.
  proto::JobStatus job;
  EXPECT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [&](const proto::JobStatus& s) {
        if (s.nodes_size() != kDaemons) return false;
        uint64_t sum = 0;
        for (const proto::NodeStatus& node : s.nodes()) {
          if (node.optimizer_state_bytes() > largest_share) return false;
          sum += node.optimizer_state_bytes();
        }
        return sum == replicated;
      },
      &job));

  // Once the run is over (its workers gone past the grace: it fails), each
  // daemon has released the run's memory.
  for (pid_t pid : workers) cluster.Kill(pid, SIGKILL);
  for (int d = 0; d < kDaemons; ++d) {
    proto::NodeStatusReply status;
    EXPECT_TRUE(cluster.WaitForNode(
        d, absl::Seconds(20),
        [](const proto::NodeStatusReply& s) {
          return s.run().state() == proto::RunStatus::STATE_FAILED;
        },
        &status))
        << "daemon " << d << ": " << status.DebugString();
    EXPECT_EQ(status.optimizer_state_bytes(), 0u);
    EXPECT_EQ(status.shard_bytes(), 0u);
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
