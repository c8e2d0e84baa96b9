// starling-node and its --coordinator flag: a malformed address fails at
// once (far below the join timeout) with one line naming the flag and the
// value; an unreachable coordinator is retried, with the cause (connection
// refused) in the log within seconds and again every few seconds, and the
// node joins as soon as the coordinator comes up.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;

// Lines of `log` that contain every one of `parts`.
int LinesWithAll(const std::string& log,
                 const std::vector<std::string>& parts) {
  int count = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    bool all = true;
    for (const std::string& part : parts) {
      all = all && line.find(part) != absl::string_view::npos;
    }
    count += all ? 1 : 0;
  }
  return count;
}

TEST(CoordinatorAddress, MalformedFailsAtOnceWithOneLineNamingFlagAndValue) {
  const std::string node = BinaryPath("server/node/starling-node");
  for (const std::string address : {"127.0.0.1:99999", "not a host!!"}) {
    const absl::Time start = absl::Now();
    const coordinator::RunResult result = coordinator::RunBinary(
        {node, absl::StrCat("--coordinator=", address), "--job_id=j",
         absl::StrCat("--data_port=", PickLoopbackPort()), "--admin_port=0",
         "--metrics_port=0",
         absl::StrCat("--worker_socket=/tmp/starling-coordinator-address-",
                      ::getpid(), ".sock"),
         "--timeout=30s"},
        20);
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(result.exit_code, 1) << address << ": " << result.output;
    EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
    EXPECT_THAT(result.output,
                HasSubstr(absl::StrCat("--coordinator=", address, ": ")));
    // The join timeout is 30 s; a parse error needs no network at all.
    EXPECT_LT(took, absl::Seconds(3)) << address;
  }
}

TEST(CoordinatorAddress,
     UnreachableIsLoggedWithItsCauseWhileRetryingThenJoins) {
  ClusterOptions options;
  options.daemons = 1;
  options.local_workers = 1;
  options.parameter_count = 16;
  NodeCluster cluster(options);
  // No coordinator yet: its port is closed (the node has --timeout=30s).
  const absl::Time start = absl::Now();
  const pid_t node = cluster.StartDaemon(0, {});
  const std::vector<std::string> cause = {cluster.coordinator_address(),
                                          "Connection refused"};
  // The first failure is logged at once, later ones every few seconds.
  int logged = 0;
  absl::Duration first = absl::InfiniteDuration();
  const absl::Time deadline = start + absl::Seconds(9);
  while (logged < 2 && absl::Now() < deadline) {
    logged = LinesWithAll(cluster.Stderr(node), cause);
    if (logged >= 1 && first == absl::InfiniteDuration()) {
      first = absl::Now() - start;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  const std::string log = cluster.Stderr(node);
  EXPECT_LT(first, absl::Seconds(3)) << log;
  EXPECT_GE(logged, 2) << "the cause was not logged again while retrying\n"
                       << log;
  ASSERT_TRUE(cluster.Alive(node)) << "the node gave up early\n" << log;

  // It was retrying: it joins as soon as the coordinator is up.
  cluster.StartCoordinator();
  proto::NodeStatusReply status;
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(10), [](const proto::NodeStatusReply&) { return true; },
      &status))
      << cluster.ServerLogs();
  EXPECT_EQ(status.rank(), 0);
  proto::JobStatus job;
  std::string error;
  ASSERT_TRUE(cluster.JobStatus(&job, &error)) << error;
  EXPECT_TRUE(job.formed());
  EXPECT_EQ(job.healthy_nodes(), 1);
}

// SIGTERM while the node still reaches its coordinator (none listens), or
// waits in a join the coordinator holds (a group of 2 with 1 node): it
// exits at once with a line saying so, not at --timeout (30 s here), and
// the group it would have joined never sees it join and leave.
TEST(CoordinatorAddress, SigtermWhileJoiningExitsAtOnce) {
  for (const bool coordinator_up : {false, true}) {
    SCOPED_TRACE(coordinator_up ? "held by the coordinator" : "unreachable");
    ClusterOptions options;
    options.daemons = 1;
    options.local_workers = 1;
    options.parameter_count = 16;
    NodeCluster cluster(options);
    if (coordinator_up) {
      cluster.StartCoordinatorWith("coordinator", {"--expected_nodes=2"});
    }
    const pid_t node = cluster.StartDaemon(0, {});
    // Joining: retrying (its cause logged) or held (the coordinator counts
    // it among the joined).
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    bool joining = false;
    while (!joining && absl::Now() < give_up) {
      if (coordinator_up) {
        proto::JobStatus job;
        std::string error;
        joining = cluster.JobStatus(&job, &error) && job.nodes_size() == 1;
      } else {
        joining =
            LinesWithAll(cluster.Stderr(node), {cluster.coordinator_address(),
                                                "Connection refused"}) >= 1;
      }
      if (!joining) absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(joining) << cluster.ServerLogs();
    const absl::Time killed = absl::Now();
    cluster.Kill(node, SIGTERM);
    const ProcessResult r = cluster.Wait(node, absl::Seconds(10));
    EXPECT_FALSE(r.timed_out) << r.err;
    EXPECT_LT(absl::Now() - killed, absl::Seconds(3));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("received signal 15 while joining job test "
                                 "at the coordinator"))
        << r.err;
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
