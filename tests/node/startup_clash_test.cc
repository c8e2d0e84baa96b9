// A node whose data port, admin port or worker socket is already taken by a
// live daemon fails at start-up, before it joins: it exits 1 with one line
// naming the port or socket, the coordinator never lists it, the live
// daemon it clashed with is unharmed, and the group then forms with the
// right node and trains.
#include <signal.h>
#include <sys/stat.h>

#include <functional>
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

// Hostnames sort after "node0", so the clashing node would take rank 1 if
// it joined, and the group (2 nodes) would form with it.
constexpr char kClashHost[] = "clash";

bool Lists(const proto::JobStatus& status, const std::string& host) {
  for (const proto::NodeStatus& node : status.nodes()) {
    if (node.peer().hostname() == host) return true;
  }
  return false;
}

// What clashes with node0 of `cluster`: the clashing node's flag, and the
// texts its one line must contain.
struct Clash {
  std::string flag;
  std::vector<std::string> expected;
};

// Starts node0; once the coordinator lists it, runs a node named
// kClashHost with its own free ports but `clash(cluster)`'s flag, and
// checks that it exits 1 with one line containing each expected text, and
// never joins. Then node1 completes the group, which trains
// bit-identically.
void ExpectClashFailsBeforeJoining(
    const std::function<Clash(const NodeCluster&)>& make_clash) {
  ClusterOptions options;
  options.daemons = 2;
  options.local_workers = 1;
  options.parameter_count = 64;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  const pid_t node0 = cluster.StartDaemon(0, {});
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) { return s.nodes_size() == 1; }, &status))
      << status.DebugString() << cluster.ServerLogs();

  // The clashing node's own ports are free, except the one under test.
  std::vector<std::string> flags = {
      absl::StrCat("--hostname=", kClashHost),
      absl::StrCat("--data_port=", PickLoopbackPort()),
      absl::StrCat("--admin_port=", PickLoopbackPort()), "--metrics_port=0",
      absl::StrCat("--worker_socket=", cluster.socket_path(7))};
  const Clash clash = make_clash(cluster);
  flags.push_back(clash.flag);
  const pid_t clashing =
      cluster.Spawn("clash", BinaryPath("server/node/starling-node"),
                    cluster.DaemonFlags(0, flags));
  const ProcessResult result = cluster.Wait(clashing, absl::Seconds(10));
  ASSERT_FALSE(result.timed_out) << "the clashing node did not exit\n"
                                 << result.err << cluster.ServerLogs();
  EXPECT_EQ(result.exit_code, 1) << result.err;
  EXPECT_EQ(coordinator::CountLines(result.err), 1) << result.err;
  for (const std::string& text : clash.expected) {
    EXPECT_THAT(result.err, HasSubstr(text));
  }

  // It never joined: the coordinator still waits with node0 alone.
  std::string error;
  ASSERT_TRUE(cluster.JobStatus(&status, &error)) << error;
  EXPECT_FALSE(status.formed()) << status.DebugString();
  EXPECT_EQ(status.nodes_size(), 1) << status.DebugString();
  EXPECT_FALSE(Lists(status, kClashHost)) << status.DebugString();
  EXPECT_TRUE(cluster.Alive(node0)) << cluster.ServerLogs();
  struct stat st = {};
  EXPECT_EQ(::stat(cluster.socket_path(0).c_str(), &st), 0)
      << "node0's worker socket is gone";

  // The right node completes the group; the clashing one is not in it.
  cluster.StartDaemon(1, {});
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) {
        return s.formed() && s.healthy_nodes() == 2;
      },
      &status))
      << status.DebugString() << cluster.ServerLogs();
  ASSERT_EQ(status.nodes_size(), 2);
  EXPECT_EQ(status.nodes(0).peer().hostname(), "node0");
  EXPECT_EQ(status.nodes(1).peer().hostname(), "node1");
  EXPECT_FALSE(Lists(status, kClashHost));

  // node0, whose port or socket was clashed with, trains with node1.
  ExpectTrainingBitIdentical(cluster, {"--steps=10"}, absl::Seconds(20));
}

TEST(StartupClash, DataPortOfALiveDaemonFailsBeforeJoiningNamingThePort) {
  ExpectClashFailsBeforeJoining([](const NodeCluster& cluster) {
    const int port = cluster.data_port(0);
    return Clash{absl::StrCat("--data_port=", port),
                 {absl::StrCat("port ", port, " (--data_port)"), "in use"}};
  });
}

TEST(StartupClash, AdminPortOfALiveDaemonFailsBeforeJoiningNamingThePort) {
  ExpectClashFailsBeforeJoining([](const NodeCluster& cluster) {
    const int port = cluster.admin_port(0);
    return Clash{absl::StrCat("--admin_port=", port),
                 {absl::StrCat("port ", port, " (--admin_port)"), "in use"}};
  });
}

TEST(StartupClash, WorkerSocketOfALiveDaemonFailsBeforeJoiningNamingIt) {
  ExpectClashFailsBeforeJoining([](const NodeCluster& cluster) {
    const std::string path = cluster.socket_path(0);
    return Clash{absl::StrCat("--worker_socket=", path),
                 {absl::StrCat("worker socket ", path), "--worker_socket"}};
  });
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
