// kill -9 of one daemon mid-run: the survivors' workers fail with an error
// naming the lost rank, nothing hangs, and the coordinator marks the node
// LOST and re-forms the group without it. Survivors learn of the loss from the
// data plane (the closed connection) and from each other (a rank whose step
// failed tells the others at once), never by waiting out the collective timeout
// for a healthy rank.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

// Kills daemon 3 of 4 mid-run; every survivor's worker (not rejoining the
// run, which goes on: reform_test) must have been told,
// naming it, within `bound` of the kill.
void KillOneDaemonMidRun(const ClusterOptions& options, absl::Duration bound) {
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = cluster.StartAllWorkers(
      {"--steps=100000", "--step_delay=5ms", "--timeout=20s", "--rejoins=0"});

  // Mid-run: wait (bounded) until the coordinator has seen iterations.
  proto::JobStatus status;
  const bool running = cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) {
        if (!s.formed()) return false;
        for (const proto::NodeStatus& node : s.nodes()) {
          if (node.last_iteration() < 5) return false;
        }
        return true;
      },
      &status);
  ASSERT_TRUE(running) << "the job did not get going\n" << cluster.ServerLogs();
  cluster.ExpectPeerTransports(options.daemons);

  constexpr int kVictim = 3;
  const absl::Time killed = absl::Now();
  cluster.Kill(cluster.daemon_pid(kVictim), SIGKILL);
  const std::string victim = absl::StrCat(
      "rank ", kVictim, " (127.0.0.1:", cluster.data_port(kVictim));
  for (int d = 0; d < options.daemons; ++d) {
    ProcessResult result = cluster.Wait(workers[d], absl::Seconds(15));
    ASSERT_FALSE(result.timed_out) << "worker of daemon " << d << " hung\n"
                                   << cluster.ServerLogs();
    EXPECT_EQ(result.exit_code, 1);
    if (d == kVictim) {
      EXPECT_THAT(result.err, HasSubstr("connection to the node daemon lost"));
    } else {
      EXPECT_THAT(result.err, HasSubstr(victim)) << "daemon " << d;
    }
  }
  EXPECT_LT(absl::Now() - killed, bound);

  // The coordinator marked it LOST and re-formed the group without it
  // (--rejoin_grace 0): epoch 2, the survivors re-numbered.
  const bool reformed = cluster.WaitForJob(
      absl::Seconds(10),
      [&options](const proto::JobStatus& s) {
        return s.group_epoch() == 2 && s.nodes_size() == options.daemons - 1;
      },
      &status);
  EXPECT_TRUE(reformed) << "the coordinator did not re-form without rank 3\n"
                        << cluster.ServerLogs();
  if (reformed) {
    EXPECT_EQ(status.healthy_nodes(), options.daemons - 1);
    // Its peers saw its connections end and told the coordinator, which
    // then only waited for its next heartbeat slot (or, if their report
    // came late, the whole heartbeat timeout).
    EXPECT_THAT(
        status.last_error(),
        AllOf(HasSubstr(absl::StrCat("rank 3 (node3, 127.0.0.1:",
                                     cluster.data_port(kVictim), ") lost: ")),
              AnyOf(HasSubstr("vanished from the data plane of rank"),
                    HasSubstr("no heartbeat"))));
  }

  // A survivor's admin view of the group is the new one, without it.
  proto::GroupReply group;
  std::string error;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up &&
         !(cluster.NodeGroup(0, &group, &error) && group.group_epoch() == 2)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(group.group_epoch(), 2u) << error << cluster.ServerLogs();
  ASSERT_EQ(group.peers_size(), options.daemons - 1);
  for (const proto::PeerInfo& peer : group.peers()) {
    EXPECT_NE(peer.hostname(), "node3");
  }
}

ClusterOptions FourDaemons() {
  ClusterOptions options;
  options.daemons = 4;
  options.local_workers = 1;
  options.parameter_count = 1000;
  options.heartbeat_timeout = absl::Seconds(2);
  return options;
}

TEST(DaemonFailure, KilledDaemonIsNamedBySurvivorsAndMarkedLost) {
  ClusterOptions options = FourDaemons();
  options.collective_timeout = absl::Seconds(3);
  // 3 s collective timeout plus slack for process exit on 2 busy cores.
  KillOneDaemonMidRun(options, absl::Seconds(10));
}

// With a long collective timeout (and the default 60 s worker grace, which
// the step's deadline includes), no survivor waits it out.
TEST(DaemonFailure, NoSurvivorWaitsOutTheCollectiveTimeout) {
  ClusterOptions options = FourDaemons();
  options.collective_timeout = absl::Seconds(30);
  KillOneDaemonMidRun(options, absl::Seconds(8));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
