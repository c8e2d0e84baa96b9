#include "tests/node/reform_util.h"

#include <signal.h>

#include "absl/time/time.h"

namespace starling {
namespace testing_node {

std::vector<pid_t> StartTraining(NodeCluster& cluster,
                                 const std::vector<std::string>& flags,
                                 int64_t iterations) {
  std::vector<pid_t> workers;
  for (int d = 0; d < cluster.options().daemons; ++d) {
    workers.push_back(cluster.StartWorker(d, 0, flags));
  }
  proto::JobStatus status;
  EXPECT_TRUE(cluster.WaitForJob(
      absl::Seconds(30),
      [iterations](const proto::JobStatus& s) {
        if (!s.formed()) return false;
        for (const proto::NodeStatus& node : s.nodes()) {
          if (node.last_iteration() < iterations) return false;
        }
        return true;
      },
      &status))
      << "the job did not get to iteration " << iterations << "\n"
      << cluster.ServerLogs();
  return workers;
}

void KillDaemonAndItsWorker(NodeCluster& cluster,
                            const std::vector<pid_t>& workers, int victim) {
  cluster.Kill(cluster.daemon_pid(victim), SIGKILL);
  cluster.Kill(workers[victim], SIGKILL);
  cluster.Wait(cluster.daemon_pid(victim), absl::Seconds(10));
  cluster.Wait(workers[victim], absl::Seconds(10));
}

::testing::AssertionResult TakenBackIntoRun1(NodeCluster& cluster, int victim,
                                             proto::JobStatus* status) {
  const int daemons = cluster.options().daemons;
  if (cluster.WaitForJob(
          absl::Seconds(30),
          [daemons](const proto::JobStatus& s) {
            return s.group_epoch() >= 2 && s.group_size() == daemons &&
                   s.healthy_nodes() == daemons &&
                   s.current_run().run_id() == 1;
          },
          status)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "daemon " << victim << " was not taken back into run 1\n"
         << cluster.ServerLogs();
}

}  // namespace testing_node
}  // namespace starling
