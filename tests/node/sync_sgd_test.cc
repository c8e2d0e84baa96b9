// Coordinator + 4 daemons + 8 workers (2 per daemon) run 50 synchronous SGD
// steps on the quadratic of worker/examples/quadratic.h over loopback.
// Every worker must end with bit-identical parameters, equal to a
// single-process reference within 1e-5 absolute (the daemons sum in a
// different order than the reference: float rounding only).
// The async variant (staleness 1: asynchronous pushes, each step computed
// on parameters one step old, so the result depends on timing) must still
// give every worker bit-identical parameters, within 1e-3 of the optimum
// after 100 steps (the stale iteration contracts by ~0.89 per step).
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {
namespace {

constexpr int kDaemons = 4;
constexpr int kLocalWorkers = 2;
constexpr int kWorkers = kDaemons * kLocalWorkers;
constexpr int kDim = 1000;
constexpr int kSteps = 50;
constexpr float kLearningRate = 0.1f;
constexpr double kTolerance = 1e-5;

std::vector<float> Reference() {
  return SyncSgdReference(kWorkers, kDim, kSteps, kLearningRate);
}

void RunJob(int staleness) {
  const int steps = staleness == 0 ? kSteps : 2 * kSteps;
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = kLocalWorkers;
  options.parameter_count = kDim;
  options.learning_rate = kLearningRate;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<std::string> flags = {absl::StrCat("--steps=", steps),
                                    absl::StrCat("--staleness=", staleness),
                                    "--timeout=40s"};
  flags.push_back("--check_allreduce");
  const std::vector<pid_t> workers = cluster.StartAllWorkers(flags);

  std::vector<std::string> params;
  for (pid_t pid : workers) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(50));
    ASSERT_FALSE(result.timed_out) << result.err << cluster.ServerLogs();
    ASSERT_EQ(result.exit_code, 0) << result.err << cluster.ServerLogs();
    EXPECT_NE(result.out.find("allreduce=ok"), std::string::npos);
    params.push_back(ParamsHex(result.out));
    ASSERT_EQ(params.back().size(), kDim * 8u) << result.out;
  }
  for (int w = 1; w < kWorkers; ++w) {
    EXPECT_EQ(params[w], params[0]) << "worker " << w << " differs";
  }
  cluster.ExpectPeerTransports(kDaemons);

  const std::vector<float> got = ParamsOf(absl::StrCat("params=", params[0]));
  ASSERT_EQ(got.size(), static_cast<size_t>(kDim));
  if (staleness == 0) {
    const std::vector<float> want = Reference();
    double worst = 0;
    for (int i = 0; i < kDim; ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    EXPECT_LE(worst, kTolerance);
  } else {
    double worst = 0;
    for (int i = 0; i < kDim; ++i) {
      worst =
          std::max<double>(worst, std::abs(got[i] - examples::QuadraticB(i)));
    }
    EXPECT_LE(worst, 1e-3);
  }
  EXPECT_LT(examples::QuadraticLoss(got),
            0.01 * examples::QuadraticLoss(std::vector<float>(kDim, 0.0f)));

  // The daemons' /metrics saw the steps and the pushes.
  httplib::Client http("127.0.0.1", cluster.metrics_port(0));
  auto response = http.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_NE(
      response->body.find(absl::StrCat("starling_node_steps_total ", steps)),
      std::string::npos)
      << response->body;
  EXPECT_NE(response->body.find(absl::StrCat("starling_node_pushes_total ",
                                             steps * kLocalWorkers)),
            std::string::npos);
  EXPECT_NE(response->body.find("starling_node_allreduce_seconds_count"),
            std::string::npos);
}

TEST(SyncSgd, EightWorkersOnFourDaemonsMatchTheReferenceBitIdentically) {
  RunJob(/*staleness=*/0);
}

TEST(SyncSgd, AsyncPushesWithStalenessOneConverge) { RunJob(/*staleness=*/1); }

}  // namespace
}  // namespace testing_node
}  // namespace starling
