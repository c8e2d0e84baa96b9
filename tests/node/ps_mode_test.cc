// Parameter-server async mode: 4 daemons x 2 workers; each push goes to the
// shard owners, which apply it at once (gradient scale 1/8, so 8 pushes
// make one SGD step of the mean gradient) with no synchronisation between
// workers. Every worker minimises the same quadratic (--homogeneous), so
// whatever order the pushes land in, the shards converge to its optimum
// b_i: after 200 steps per worker (1600 updates of every shard) the
// parameters every worker pulls after the final barrier must be within
// 1e-3 of b_i in every element. Every daemon must have applied all 1600
// pushes to its shard.
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {
namespace {

constexpr int kDim = 1000;
constexpr int kSteps = 200;
constexpr double kTolerance = 1e-3;

TEST(ParameterServer, AsyncPushesConvergeToTheOptimum) {
  ClusterOptions options;
  options.daemons = 4;
  options.local_workers = 2;
  options.parameter_count = kDim;
  options.mode = "parameter_server";
  options.learning_rate = 0.1;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = cluster.StartAllWorkers(
      {"--steps=200", "--homogeneous", "--check_allreduce", "--timeout=40s"});
  for (pid_t pid : workers) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(55));
    ASSERT_FALSE(result.timed_out) << result.err << cluster.ServerLogs();
    ASSERT_EQ(result.exit_code, 0) << result.err << cluster.ServerLogs();
    EXPECT_NE(result.out.find("allreduce=ok"), std::string::npos);
    const std::vector<float> x = ParamsOf(result.out);
    ASSERT_EQ(x.size(), static_cast<size_t>(kDim));
    double worst = 0;
    for (int i = 0; i < kDim; ++i) {
      worst = std::max<double>(worst, std::abs(x[i] - examples::QuadraticB(i)));
    }
    EXPECT_LT(worst, kTolerance);
  }
  for (int d = 0; d < options.daemons; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    ASSERT_TRUE(cluster.NodeStatus(d, &status, &error))
        << error << cluster.ServerLogs();
    // The run is over: its record keeps the updates of this shard.
    ASSERT_GT(status.recent_runs_size(), 0) << "daemon " << d;
    EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
    EXPECT_EQ(status.recent_runs(0).steps(), 8 * kSteps) << "daemon " << d;
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
