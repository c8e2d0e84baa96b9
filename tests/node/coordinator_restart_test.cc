// A coordinator killed (-9) after the group formed and started again on the
// same address with the same flags learns the running group: within a few
// heartbeat periods `starlingctl status` shows 3 of 3 nodes healthy, and a
// training run that was going on across the restart (workers talk only to
// their daemons) finishes with every worker bit-identical to an
// uninterrupted run on the same daemons. With --state_file the restarted
// coordinator resumes its own record (the group before any node
// re-registered, and the run numbering) instead of adopting what the nodes
// report, and the same holds; with --state_etcd likewise, from a key in
// etcd.
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/etcd_test_server.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kDaemons = 3;

std::vector<ProcessResult> WaitAll(NodeCluster& cluster,
                                   const std::vector<pid_t>& pids) {
  std::vector<ProcessResult> results;
  for (pid_t pid : pids) {
    results.push_back(cluster.Wait(pid, absl::Seconds(30)));
  }
  return results;
}

// Kills the coordinator mid-run and starts it again with
// `coordinator_flags`; checks the group and the run come through whole.
// Sets `*restarted_stderr` to the restarted coordinator's stderr.
// With `secret`, the coordinator and the daemons run with it as their
// cluster secret (so each member signs its calls under its own key).
void RestartMidRun(const std::vector<std::string>& coordinator_flags,
                   std::string* restarted_stderr,
                   const std::string& secret = "") {
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = 1;
  options.parameter_count = 120;
  // Heartbeats every 400 ms (a fifth of the timeout).
  options.heartbeat_timeout = absl::Seconds(2);
  options.collective_timeout = absl::Seconds(20);
  const absl::Duration heartbeat_period = options.heartbeat_timeout / 5;
  NodeCluster cluster(options);
  std::vector<std::string> with_secret = coordinator_flags;
  std::vector<std::string> daemon_flags;
  if (!secret.empty()) {
    const std::string file = TempPath("cluster.secret");
    {
      std::ofstream out(file);
      out << secret;
    }
    EXPECT_EQ(::chmod(file.c_str(), 0600), 0);
    with_secret.push_back(absl::StrCat("--cluster_secret_file=", file));
    daemon_flags.push_back(absl::StrCat("--cluster_secret_file=", file));
    cluster.set_operator_secret(secret);
  }
  pid_t coordinator = cluster.StartCoordinatorWith("coordinator", with_secret);
  for (int d = 0; d < kDaemons; ++d) cluster.StartDaemon(d, daemon_flags);
  const std::vector<std::string> flags = {"--steps=250", "--step_delay=10ms",
                                          "--timeout=30s"};

  // The reference: the same run, uninterrupted, on the same daemons.
  const std::vector<ProcessResult> reference =
      WaitAll(cluster, cluster.StartAllWorkers(flags));
  for (const ProcessResult& r : reference) {
    ASSERT_EQ(r.exit_code, 0) << r.err << cluster.ServerLogs();
  }
  const std::string expected = ParamsHex(reference[0].out);
  ASSERT_FALSE(expected.empty());

  const std::vector<pid_t> workers = cluster.StartAllWorkers(flags);
  // Mid-run: every daemon applied some steps.
  {
    const absl::Time deadline = absl::Now() + absl::Seconds(15);
    bool running = false;
    while (!running && absl::Now() < deadline) {
      running = true;
      for (int d = 0; d < kDaemons && running; ++d) {
        proto::NodeStatusReply status;
        std::string error;
        running = cluster.NodeStatus(d, &status, &error) &&
                  status.run().state() == proto::RunStatus::STATE_RUNNING &&
                  status.run().steps() >= 20;
      }
      if (!running) absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_TRUE(running) << "the second run did not get going\n"
                         << cluster.ServerLogs();
  }

  cluster.Kill(coordinator, SIGKILL);
  const ProcessResult killed = cluster.Wait(coordinator, absl::Seconds(5));
  ASSERT_FALSE(killed.timed_out);
  const absl::Time restarted = absl::Now();
  coordinator =
      cluster.StartCoordinatorWith("coordinator_restarted", with_secret);

  // starlingctl shows the group as it is within a few heartbeat periods
  // (plus the new coordinator's start-up).
  coordinator::RunResult ctl;
  bool healthy = false;
  const absl::Time deadline = restarted + absl::Seconds(10);
  while (!healthy && absl::Now() < deadline) {
    ctl = cluster.CtlStatus();
    healthy = ctl.exit_code == 0 && ctl.output.find(absl::StrCat(
                                        kDaemons, " of ", kDaemons,
                                        " nodes healthy")) != std::string::npos;
    if (!healthy) absl::SleepFor(absl::Milliseconds(100));
  }
  const absl::Duration learned = absl::Now() - restarted;
  ASSERT_TRUE(healthy) << "starlingctl status after the restart:\n"
                       << ctl.output << "\n--- new coordinator stderr:\n"
                       << cluster.Stderr(coordinator) << cluster.ServerLogs();
  ::testing::Test::RecordProperty(
      "learned_ms", static_cast<int>(absl::ToInt64Milliseconds(learned)));
  EXPECT_LT(learned, absl::Seconds(1) + 5 * heartbeat_period) << ctl.output;
  EXPECT_THAT(ctl.output, HasSubstr("degraded: no"));

  // The run went on across the restart, and no update was lost.
  const std::vector<ProcessResult> results = WaitAll(cluster, workers);
  for (size_t w = 0; w < results.size(); ++w) {
    ASSERT_EQ(results[w].exit_code, 0)
        << "worker " << w << ": " << results[w].err
        << "\n--- new coordinator stderr:\n"
        << cluster.Stderr(coordinator) << cluster.ServerLogs();
    EXPECT_EQ(ParamsHex(results[w].out), expected) << "worker " << w;
  }
  // Still the whole group, healthy, after the run.
  ctl = cluster.CtlStatus();
  EXPECT_THAT(ctl.output, HasSubstr(absl::StrCat(kDaemons, " of ", kDaemons,
                                                 " nodes healthy")));
  for (int d = 0; d < kDaemons; ++d) {
    EXPECT_TRUE(cluster.Alive(cluster.daemon_pid(d))) << "daemon " << d;
  }
  *restarted_stderr = cluster.Stderr(coordinator);
}

TEST(CoordinatorRestart, RestartedCoordinatorLearnsTheRunningGroup) {
  std::string restarted;
  RestartMidRun({}, &restarted);
  EXPECT_THAT(restarted, HasSubstr("adopted the running group"));
}

TEST(CoordinatorRestart, RestartedCoordinatorResumesItsRecord) {
  const std::string record = TempPath("coordinator.state");
  std::string restarted;
  RestartMidRun({absl::StrCat("--state_file=", record)}, &restarted);
  EXPECT_THAT(restarted,
              HasSubstr(absl::StrCat("resumed group epoch 1 of ", kDaemons,
                                     " nodes and 2 run(s) from the "
                                     "coordinator state file ",
                                     record)));
  EXPECT_THAT(restarted, Not(HasSubstr("adopted")));
}

// With a cluster secret every member signs its calls under its own key
// (JoinResponse.member_key). A coordinator restarted without its record
// holds none of them: the members re-register, proving the secret, and
// get new ones; one that resumes its record holds them still.
TEST(CoordinatorRestart, WithAClusterSecretMembersKeepOrRenewTheirKeys) {
  const std::string secret = "coordinator-restart-test secret, 32+ bytes";
  std::string restarted;
  RestartMidRun({}, &restarted, secret);
  EXPECT_THAT(restarted, HasSubstr("adopted the running group"));
  const std::string record = TempPath("keyed.state");
  RestartMidRun({absl::StrCat("--state_file=", record)}, &restarted, secret);
  EXPECT_THAT(restarted, HasSubstr("resumed group epoch 1"));
  EXPECT_THAT(restarted, Not(HasSubstr("refused")));
}

// The same with the record in etcd (--state_etcd): the restarted
// coordinator could as well run on another host.
TEST(CoordinatorRestart, RestartedCoordinatorResumesItsRecordInEtcd) {
  coordinator::EtcdTestServer etcd;
  const absl::Status started = etcd.Start();
  ASSERT_TRUE(started.ok()) << started;
  std::string restarted;
  RestartMidRun({absl::StrCat("--state_etcd=", etcd.client_url()),
                 "--state_etcd_prefix=/restart-test"},
                &restarted);
  EXPECT_THAT(restarted, HasSubstr(absl::StrCat(
                             "resumed group epoch 1 of ", kDaemons,
                             " nodes and 2 run(s) from the coordinator's "
                             "record in etcd (key /restart-test/")));
  EXPECT_THAT(restarted, Not(HasSubstr("adopted")));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
