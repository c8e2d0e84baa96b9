// A worker declaring a tensor with another shape or dtype than the rest of
// the job gets an error naming the tensor, both declarations and where
// they came from (ranks across daemons, workers on one daemon).
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DeclareMismatch, ShapeDifferenceAcrossDaemonsNamesTensorShapesAndRanks) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 1;
  options.parameter_count = 1000;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const pid_t good = cluster.StartWorker(0, 0, {"--timeout=20s"});
  const pid_t bad =
      cluster.StartWorker(1, 0, {"--declared_dim=999", "--timeout=20s"});
  for (pid_t pid : {good, bad}) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(30));
    ASSERT_FALSE(result.timed_out) << cluster.ServerLogs();
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_THAT(result.err,
                AllOf(HasSubstr("tensor 'x'"), HasSubstr("[1000] float32"),
                      HasSubstr("[999] float32"), HasSubstr("rank 0"),
                      HasSubstr("rank 1")));
  }
}

TEST(DeclareMismatch, DtypeDifferenceOnOneDaemonNamesBothWorkers) {
  ClusterOptions options;
  options.daemons = 1;
  options.local_workers = 2;
  options.parameter_count = 1000;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const pid_t w0 =
      cluster.StartWorker(0, 0, {"--declared_dim=1000", "--timeout=3s"});
  const pid_t w1 =
      cluster.StartWorker(0, 1, {"--declare_float64", "--timeout=3s"});
  // Whichever declared second is refused at once and exits; the other one
  // waits at the end of its declarations for a partner with index 1 (a
  // worker that leaves before its run began changes nothing, so another
  // could still take the index) until its own timeout.
  int refused = 0;
  int partner_left = 0;
  for (pid_t pid : {w0, w1}) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(20));
    ASSERT_FALSE(result.timed_out) << cluster.ServerLogs();
    EXPECT_EQ(result.exit_code, 1);
    if (result.err.find("declared as") != std::string::npos) {
      ++refused;
      EXPECT_THAT(
          result.err,
          AllOf(HasSubstr("tensor 'x'"), HasSubstr("[1000] float32"),
                HasSubstr("[1000] float64"), HasSubstr("worker 0 of rank 0"),
                HasSubstr("worker 1 of rank 0")));
    } else {
      ++partner_left;
      EXPECT_THAT(result.err, HasSubstr("end of tensor declarations"));
    }
  }
  EXPECT_EQ(partner_left, 1);
  EXPECT_EQ(refused, 1);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
