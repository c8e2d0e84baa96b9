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
  // The very flags of the valid job below, one of them bad.
  const auto run_with = [&cluster](const std::string& bad_flag) {
    std::vector<std::string> argv = {
        BinaryPath("server/coordinator/starling-coordinator")};
    for (const std::string& flag : cluster.CoordinatorFlags({bad_flag})) {
      argv.push_back(flag);
    }
    return coordinator::RunBinary(argv, 20);
  };
  for (const char* bad_flag : {"--learning_rate=-1", "--learning_rate=0",
                               "--learning_rate=nan", "--optimizer=adagrad"}) {
    const coordinator::RunResult result = run_with(bad_flag);
    EXPECT_EQ(result.exit_code, 2) << bad_flag << ": " << result.output;
    EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
    EXPECT_THAT(result.output, HasSubstr(bad_flag)) << bad_flag;
  }
  // The unknown optimizer's line lists the ones there are.
  const coordinator::RunResult unknown = run_with("--optimizer=adagrad");
  EXPECT_THAT(unknown.output, HasSubstr("sgd"));
  EXPECT_THAT(unknown.output, HasSubstr("adam"));

  // A valid job on the same address forms and trains.
  cluster.StartCoordinator();
  cluster.StartDaemons();
  ExpectTrainingBitIdentical(cluster, {"--steps=10"}, absl::Seconds(30));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
