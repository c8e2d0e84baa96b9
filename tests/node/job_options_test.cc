// The coordinator refuses, at start-up, job options the daemons could not
// run (a learning rate that is not finite and > 0, an optimizer that does
// not exist), with one line naming the flag; nothing was left behind, so a
// valid job on the same address then forms and trains. (The easgd
// optimizer, --learning_rate=inf and unknown modes are in
// server/coordinator/coordinator_main_test.cc.)
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;

TEST(JobOptions,
     BadLearningRateAndUnknownOptimizerAreRefusedThenAValidJobTrains) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 1;
  options.parameter_count = 64;
  NodeCluster cluster(options);
  const struct {
    std::string flag;
    std::string named;
  } cases[] = {
      {"--learning_rate=-1", "--learning_rate=-1"},
      {"--learning_rate=0", "--learning_rate=0"},
      {"--learning_rate=nan", "--learning_rate=nan"},
      {"--optimizer=adagrad", "--optimizer=adagrad"},
  };
  for (const auto& c : cases) {
    // The very flags of the valid job below, one of them bad.
    std::vector<std::string> argv = {
        BinaryPath("server/coordinator/starling-coordinator")};
    for (const std::string& flag : cluster.CoordinatorFlags({c.flag})) {
      argv.push_back(flag);
    }
    const coordinator::RunResult result = coordinator::RunBinary(argv, 20);
    EXPECT_EQ(result.exit_code, 2) << c.flag << ": " << result.output;
    EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
    EXPECT_THAT(result.output, HasSubstr(c.named)) << c.flag;
  }
  // The unknown optimizer's line lists the ones there are.
  {
    std::vector<std::string> argv = {
        BinaryPath("server/coordinator/starling-coordinator")};
    for (const std::string& flag :
         cluster.CoordinatorFlags({"--optimizer=adagrad"})) {
      argv.push_back(flag);
    }
    const coordinator::RunResult result = coordinator::RunBinary(argv, 20);
    EXPECT_THAT(result.output, HasSubstr("sgd"));
    EXPECT_THAT(result.output, HasSubstr("adam"));
  }

  // A valid job on the same address forms and trains.
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = cluster.StartAllWorkers({"--steps=10"});
  std::string params;
  for (size_t w = 0; w < workers.size(); ++w) {
    const ProcessResult r = cluster.Wait(workers[w], absl::Seconds(30));
    ASSERT_EQ(r.exit_code, 0)
        << "worker " << w << ": " << r.err << cluster.ServerLogs();
    if (w == 0) params = ParamsHex(r.out);
    EXPECT_EQ(ParamsHex(r.out), params) << "worker " << w;
  }
  EXPECT_FALSE(params.empty());
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
