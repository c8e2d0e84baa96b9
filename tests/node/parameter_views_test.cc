// Zero-copy parameter reads (Client::ParametersView) in synchronous SGD:
// coordinator + 2 daemons + 4 workers (2 per daemon) run 50 steps on the
// quadratic of worker/examples/quadratic.h twice, once pulling copies of
// the parameters into the workers' pools and once reading them in place
// from the daemons' read-only memory. Proves that
//   - the views give bit-identical parameters to the copies (and to every
//     other worker), within 1e-5 of an fp64-summed reference;
//   - a worker cannot write its view (mprotect(PROT_WRITE) fails; a write
//     through it faults in a forked child) and a view of a stale version
//     is refused naming both versions (quadratic_worker --view_checks);
//   - the daemons copy no pull bytes with views:
//     starling_node_copied_bytes_total{phase="pull"} stays 0.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {
namespace {

constexpr int kDaemons = 2;
constexpr int kLocalWorkers = 2;
constexpr int kWorkers = kDaemons * kLocalWorkers;
constexpr int kDim = 1000;
constexpr int kSteps = 50;
constexpr float kLearningRate = 0.1f;
constexpr double kTolerance = 1e-5;

std::vector<float> Reference() {
  return SyncSgdReference(kWorkers, kDim, kSteps, kLearningRate);
}

// starling_node_copied_bytes_total{phase="pull"} of daemon `daemon`.
double PullCopiedBytes(const NodeCluster& cluster, int daemon) {
  const double bytes =
      Metric(cluster.metrics_port(daemon), "starling_node_copied_bytes_total",
             {"phase=\"pull\""});
  if (std::isnan(bytes)) {
    ADD_FAILURE() << "no pull copied bytes from daemon " << daemon;
    return -1;
  }
  return bytes;
}

struct JobResult {
  // Hex parameters of each worker.
  std::vector<std::string> params;
  // Pull bytes copied by each daemon.
  std::vector<double> pull_copied_bytes;
};

JobResult RunJob(bool views) {
  JobResult out;
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = kLocalWorkers;
  options.parameter_count = kDim;
  options.learning_rate = kLearningRate;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                    "--timeout=40s"};
  if (views) {
    flags.push_back("--pull_view");
    flags.push_back("--view_checks");
  }
  const std::vector<pid_t> workers = cluster.StartAllWorkers(flags);
  for (pid_t pid : workers) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(50));
    EXPECT_FALSE(result.timed_out) << result.err << cluster.ServerLogs();
    EXPECT_EQ(result.exit_code, 0) << result.err << cluster.ServerLogs();
    if (views) {
      EXPECT_NE(result.out.find("view_checks=ok"), std::string::npos)
          << result.out << result.err;
    }
    out.params.push_back(ParamsHex(result.out));
  }
  for (int d = 0; d < kDaemons; ++d) {
    out.pull_copied_bytes.push_back(PullCopiedBytes(cluster, d));
  }
  return out;
}

TEST(ParameterViews, ViewsMatchCopiesBitIdenticallyAreReadOnlyAndCopyNothing) {
  const JobResult copies = RunJob(/*views=*/false);
  const JobResult views = RunJob(/*views=*/true);
  ASSERT_EQ(copies.params.size(), static_cast<size_t>(kWorkers));
  ASSERT_EQ(views.params.size(), static_cast<size_t>(kWorkers));
  ASSERT_EQ(copies.params[0].size(), kDim * 8u);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_EQ(copies.params[w], copies.params[0]) << "copying worker " << w;
    EXPECT_EQ(views.params[w], copies.params[0]) << "viewing worker " << w;
  }

  const std::vector<float> got =
      ParamsOf(absl::StrCat("params=", views.params[0]));
  ASSERT_EQ(got.size(), static_cast<size_t>(kDim));
  const std::vector<float> want = Reference();
  double worst = 0;
  for (int i = 0; i < kDim; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_LE(worst, kTolerance);

  for (int d = 0; d < kDaemons; ++d) {
    // Copies: (kSteps + 2) pulls of kDim floats per worker, counted 2n.
    EXPECT_EQ(copies.pull_copied_bytes[d],
              2.0 * (kSteps + 2) * kLocalWorkers * kDim * sizeof(float))
        << "daemon " << d;
    EXPECT_EQ(views.pull_copied_bytes[d], 0.0) << "daemon " << d;
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
