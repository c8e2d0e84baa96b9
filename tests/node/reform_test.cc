// A node lost, a node back: kill -9 of one daemon makes the coordinator
// re-form the group from the survivors (group epoch 2, ranks re-numbered),
// the survivors rebuild their data plane in place and train the next run at
// N-1; the daemon restarted with the same flags is taken back (epoch 3) and
// the next run trains at N again. Every run's workers end with the same
// parameters, bit for bit, and their all-reduce sums over the group as it
// stands. Prints the times from the kill to the new group and from the
// restart to the whole group (the fault table's rows, tests/fault/).
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/reform_util.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kDaemons = 3;
constexpr int kVictim = 1;

ClusterOptions Options() {
  ClusterOptions options;
  options.daemons = kDaemons;
  options.local_workers = 1;
  options.parameter_count = 1000;
  options.heartbeat_timeout = absl::Seconds(2);
  options.collective_timeout = absl::Seconds(10);
  return options;
}

const std::vector<std::string> kWorkerFlags = {"--steps=20",
                                               "--check_allreduce"};

// Starts a worker on each of `daemons`; each must exit 0 with the same
// parameters and allreduce=ok.
void TrainOn(NodeCluster& cluster, const std::vector<int>& daemons) {
  std::vector<pid_t> pids;
  for (int d : daemons) pids.push_back(cluster.StartWorker(d, 0, kWorkerFlags));
  std::string first;
  for (size_t i = 0; i < pids.size(); ++i) {
    const ProcessResult r = cluster.Wait(pids[i], absl::Seconds(60));
    ASSERT_EQ(r.exit_code, 0) << "worker on daemon " << daemons[i] << ": "
                              << r.err << cluster.ServerLogs();
    EXPECT_THAT(r.out, HasSubstr("allreduce=ok"));
    const size_t at = r.out.find("params=");
    ASSERT_NE(at, std::string::npos) << r.out;
    if (i == 0) first = r.out.substr(at);
    EXPECT_EQ(r.out.substr(at), first) << "daemon " << daemons[i];
  }
}

// Waits (bounded) until every daemon in `daemons` serves group `epoch` of
// `size` ranks; returns when the last did.
absl::Time AwaitGroup(NodeCluster& cluster, const std::vector<int>& daemons,
                      uint64_t epoch, int size) {
  for (int d : daemons) {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    proto::GroupReply group;
    std::string error;
    bool there = false;
    while (!there && absl::Now() < give_up) {
      there = cluster.NodeGroup(d, &group, &error) &&
              group.group_epoch() == epoch && group.peers_size() == size;
      // Its data plane formed: no peer still JOINING.
      for (const proto::PeerInfo& peer : group.peers()) {
        there &= peer.health() != proto::NODE_HEALTH_JOINING;
      }
      if (!there) absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(there) << "daemon " << d << " does not serve group epoch "
                       << epoch << " of " << size << " (has epoch "
                       << group.group_epoch() << " of " << group.peers_size()
                       << ")\n"
                       << cluster.ServerLogs();
  }
  return absl::Now();
}

// Waits (bounded) until the coordinator marks daemon kVictim LOST.
bool AwaitVictimLost(NodeCluster& cluster, proto::JobStatus* status) {
  return cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) {
        return s.nodes_size() == kDaemons &&
               s.nodes(kVictim).peer().health() == proto::NODE_HEALTH_LOST;
      },
      status);
}

TEST(Reform, AKilledDaemonLeavesTheGroupAndComesBackAfterARestart) {
  NodeCluster cluster(Options());
  cluster.StartCoordinator();
  cluster.StartDaemons();
  TrainOn(cluster, {0, 1, 2});

  // A worker that stays connected across the re-formation (idle between
  // runs) has the old group's rank and size: it is told to reconnect.
  client::ClientOptions idle_options;
  idle_options.socket_path = cluster.socket_path(2);
  idle_options.worker_name = "idle";
  idle_options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<client::Client>> idle =
      client::Client::Connect(idle_options);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ((*idle)->rank(), 2);

  // kill -9 between runs: the coordinator drops it after its heartbeat
  // timeout and re-forms with the other two.
  const absl::Time killed = absl::Now();
  cluster.Kill(cluster.daemon_pid(kVictim), SIGKILL);
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) {
        return s.group_epoch() == 2 && s.group_size() == kDaemons - 1;
      },
      &status))
      << "the coordinator did not re-form without daemon " << kVictim << "\n"
      << cluster.ServerLogs();
  const absl::Time reformed = absl::Now();
  EXPECT_EQ(status.nodes(0).peer().hostname(), "node0");
  EXPECT_EQ(status.nodes(1).peer().hostname(), "node2");
  const absl::Time served = AwaitGroup(cluster, {0, 2}, 2, kDaemons - 1);
  const absl::Status refused =
      (*idle)->DeclareTensor("x", {1000}, client::DataType::kFloat32);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_THAT(std::string(refused.message()),
              AllOf(HasSubstr("the group re-formed since worker 'idle' "
                              "(index 0) attached"),
                    HasSubstr("group epoch 1 -> 2"), HasSubstr("reconnects")));
  idle->reset();
  // The next run trains at N-1.
  TrainOn(cluster, {0, 2});

  // Restarted with the same flags: taken back between runs.
  const absl::Time restarted = absl::Now();
  cluster.StartDaemon(kVictim, {});
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(30),
      [](const proto::JobStatus& s) {
        return s.group_epoch() == 3 && s.group_size() == kDaemons &&
               s.healthy_nodes() == kDaemons;
      },
      &status))
      << "the coordinator did not take daemon " << kVictim << " back\n"
      << cluster.ServerLogs();
  const absl::Time whole = AwaitGroup(cluster, {0, 1, 2}, 3, kDaemons);
  TrainOn(cluster, {0, 1, 2});

  // Each survivor replaced its plane twice, and says so.
  EXPECT_EQ(Metric(cluster.metrics_port(0), "starling_node_regroups_total"), 2);
  EXPECT_EQ(Metric(cluster.metrics_port(0), "starling_node_group_epoch"), 3);
  EXPECT_EQ(Metric(cluster.metrics_port(kVictim), "starling_node_group_epoch"),
            3);
  std::printf(
      "fault: kill -9 of a daemon between runs (3 daemons, heartbeat "
      "timeout 2s): re-formed at N-1 after %.2fs, survivors serving after "
      "%.2fs; restarted daemon: group whole after %.2fs\n",
      absl::ToDoubleSeconds(reformed - killed),
      absl::ToDoubleSeconds(served - killed),
      absl::ToDoubleSeconds(whole - restarted));
}

// With --rejoin_grace, a daemon that stops answering and comes back within
// it keeps its rank: the group re-forms whole (a new epoch, so that its
// peers, which dropped it, connect to it again) and trains at N.
TEST(Reform, ADaemonBackWithinTheGraceKeepsItsRankAndTrains) {
  NodeCluster cluster(Options());
  cluster.StartCoordinatorWith("coordinator", {"--rejoin_grace=60s"});
  cluster.StartDaemons();
  TrainOn(cluster, {0, 1, 2});
  cluster.Kill(cluster.daemon_pid(kVictim), SIGSTOP);
  proto::JobStatus status;
  ASSERT_TRUE(AwaitVictimLost(cluster, &status)) << cluster.ServerLogs();
  EXPECT_EQ(status.group_epoch(), 1u);  // within its grace: not dropped
  cluster.Kill(cluster.daemon_pid(kVictim), SIGCONT);
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) {
        return s.group_epoch() == 2 && s.group_size() == kDaemons &&
               s.healthy_nodes() == kDaemons;
      },
      &status))
      << cluster.ServerLogs();
  EXPECT_EQ(status.nodes(kVictim).peer().hostname(),
            absl::StrCat("node", kVictim));
  EXPECT_THAT(status.reformed_because(),
              HasSubstr(absl::StrCat("rank ", kVictim, " (node", kVictim)));
  AwaitGroup(cluster, {0, 1, 2}, 2, kDaemons);
  TrainOn(cluster, {0, 1, 2});
}

// StartTraining, then kills daemon `victim` once every node ran a few
// steps.
std::vector<pid_t> TrainAndKill(NodeCluster& cluster,
                                const std::vector<std::string>& flags,
                                int victim = kVictim) {
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  cluster.Kill(cluster.daemon_pid(victim), SIGKILL);
  return workers;
}

// Waits (bounded) for worker `pid` of daemon `d`: it must not hang and
// must exit 0 (the cluster's logs otherwise), and end with the parameters
// in `*params` (the first worker's: set by it). Returns what it printed.
ProcessResult WaitFinished(NodeCluster& cluster, pid_t pid, int d,
                           std::string* params) {
  const ProcessResult r = cluster.Wait(pid, absl::Seconds(60));
  EXPECT_FALSE(r.timed_out) << "worker of daemon " << d << " hung\n"
                            << cluster.ServerLogs();
  EXPECT_EQ(r.exit_code, 0)
      << "daemon " << d << ": " << r.err << cluster.ServerLogs();
  const size_t at = r.out.find("params=");
  EXPECT_NE(at, std::string::npos) << r.out;
  const std::string mine =
      at == std::string::npos ? std::string() : r.out.substr(at);
  if (params->empty()) *params = mine;
  EXPECT_EQ(mine, *params) << "daemon " << d;
  return r;
}

// The job's latest run (in a group of `group_size` where > 0) finished
// all its `steps`.
void ExpectRunFinished(NodeCluster& cluster, int group_size, int64_t steps) {
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [group_size](const proto::JobStatus& s) {
        return s.recent_runs_size() >= 1 &&
               (group_size == 0 || s.group_size() == group_size);
      },
      &status))
      << cluster.ServerLogs();
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED)
      << status.recent_runs(0).error();
  EXPECT_EQ(status.recent_runs(0).steps(), steps);
}

// The number after `key` in `text` (-1 if absent).
int64_t NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + key.size(), nullptr, 10);
}

// The worker `r` rejoined run 1 and was told no acknowledged step is lost.
void ExpectRejoinedNothingLost(const ProcessResult& r) {
  EXPECT_THAT(r.err, HasSubstr("rejoined run 1 at step")) << r.err;
  EXPECT_THAT(r.err, ::testing::Not(HasSubstr("ACKNOWLEDGED UPDATES LOST")))
      << r.err;
}

// kill -9 of daemon kVictim and its worker (of `workers`, one per daemon),
// both waited for.
void KillVictimAndItsWorker(NodeCluster& cluster,
                            const std::vector<pid_t>& workers) {
  KillDaemonAndItsWorker(cluster, workers, kVictim);
}

// With buddy replicas (the default), the run goes on: the survivors take
// the lost daemon's shard and optimizer state from its buddy, agree on
// the last step every shard can be brought to, and their workers rejoin
// and finish the run; no step a push returned for is lost, and the
// survivors end bit-identical.
TEST(Reform, ADaemonKilledMidRunTheRunGoesOnAtNMinus1) {
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = TrainAndKill(
      cluster, {"--steps=400", "--step_delay=5ms", "--timeout=20s"});
  std::string first;
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = cluster.Wait(workers[d], absl::Seconds(60));
    ASSERT_FALSE(r.timed_out) << "worker of daemon " << d << " hung\n"
                              << cluster.ServerLogs();
    if (d == kVictim) {
      EXPECT_EQ(r.exit_code, 1);
      continue;
    }
    ASSERT_EQ(r.exit_code, 0)
        << "daemon " << d << ": " << r.err << cluster.ServerLogs();
    // Told, and nothing acknowledged lost.
    ExpectRejoinedNothingLost(r);
    const int64_t resumed = NumberAfter(r.err, "rejoined run 1 at step ");
    const int64_t acknowledged =
        NumberAfter(r.err, "acknowledged through step ");
    EXPECT_GT(resumed, acknowledged) << r.err;
    EXPECT_THAT(r.err, HasSubstr(" of 2;")) << r.err;
    const size_t at = r.out.find("params=");
    ASSERT_NE(at, std::string::npos) << r.out;
    if (first.empty()) first = r.out.substr(at);
    EXPECT_EQ(r.out.substr(at), first) << "daemon " << d;
  }
  AwaitGroup(cluster, {0, 2}, 2, kDaemons - 1);
  // Run 1 finished on the survivors; the next run trains at N-1.
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) { return s.recent_runs_size() >= 1; },
      &status));
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED)
      << status.recent_runs(0).error();
  TrainOn(cluster, {0, 2});
}

// A daemon killed -9 mid-run and restarted with the same flags (as
// systemd's Restart=on-failure does) is taken back into the running run:
// the coordinator drops its old self and takes the new one in (one
// re-formation, or two where the loss was acted on first), the daemons
// that carry the run send it its shard, its buddy's replica and the
// parameters, and a worker started on it resumes the run where it goes
// on. Every worker ends with the same parameters; the run finishes on
// the whole group; no acknowledged step is lost.
TEST(Reform, ADaemonRestartedMidRunIsTakenBackIntoTheRun) {
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  constexpr int64_t kSteps = 1500;
  const std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                          "--step_delay=5ms", "--timeout=20s"};
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  const absl::Time killed = absl::Now();
  KillVictimAndItsWorker(cluster, workers);
  const absl::Time restarted = absl::Now();
  cluster.StartDaemon(kVictim, {});
  // Serving in a group of all three with the others (the data plane
  // formed, its state received).
  proto::JobStatus status;
  ASSERT_TRUE(TakenBackIntoRun1(cluster, kVictim, &status));
  const uint64_t epoch = status.group_epoch();
  const absl::Time whole = AwaitGroup(cluster, {0, 1, 2}, epoch, kDaemons);
  workers[kVictim] = cluster.StartWorker(kVictim, 0, flags);
  std::string params;
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &params);
    if (d == kVictim) {
      // It joined the run mid-way, at the step the group went on from
      // (or later, had the others gone on without it meanwhile).
      EXPECT_GT(NumberAfter(r.err, "resumed run 1 at step "), 5) << r.err;
      continue;
    }
    ExpectRejoinedNothingLost(r);
    EXPECT_THAT(r.err, HasSubstr(" of 3;")) << r.err;
  }
  EXPECT_THAT(cluster.Stderr(cluster.daemon_pid(kVictim)),
              HasSubstr("goes on at step"));
  ExpectRunFinished(cluster, kDaemons, kSteps);
  // The next run trains on all three.
  TrainOn(cluster, {0, 1, 2});
  std::printf(
      "fault: kill -9 of a daemon mid-run and restart (3 daemons, 1000 "
      "parameters, momentum): back in the running run and serving %.2fs "
      "after the restart (%.2fs after the kill)\n",
      absl::ToDoubleSeconds(whole - restarted),
      absl::ToDoubleSeconds(whole - killed));
}

// The worker of a daemon killed -9 mid-run need not die with it: it
// rejoins through the restarted daemon (same socket), which is taken back
// into the running run, and goes on where the group goes on. At once, or
// (as systemd's RestartSec=) a while later with a --rejoin_grace that
// holds the run for it.
class RestartedDaemonTest : public ::testing::TestWithParam<absl::Duration> {};

TEST_P(RestartedDaemonTest, AWorkerRejoinsTheRunThroughItsRestartedDaemon) {
  const absl::Duration down = GetParam();
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  if (down > absl::ZeroDuration()) {
    cluster.StartCoordinatorWith("coordinator", {"--rejoin_grace=30s"});
  } else {
    cluster.StartCoordinator();
  }
  cluster.StartDaemons();
  constexpr int64_t kSteps = 1500;
  const std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                          "--step_delay=5ms", "--timeout=30s"};
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  cluster.Kill(cluster.daemon_pid(kVictim), SIGKILL);
  cluster.Wait(cluster.daemon_pid(kVictim), absl::Seconds(10));
  // Down for a while, as a restart delay keeps it.
  absl::SleepFor(down);
  cluster.StartDaemon(kVictim, {});
  std::string params;
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &params);
    ExpectRejoinedNothingLost(r);
  }
  ExpectRunFinished(cluster, kDaemons, kSteps);
}

INSTANTIATE_TEST_SUITE_P(Restarts, RestartedDaemonTest,
                         ::testing::Values(absl::ZeroDuration(),
                                           absl::Seconds(3)),
                         [](const ::testing::TestParamInfo<absl::Duration>& i) {
                           return i.param == absl::ZeroDuration()
                                      ? std::string("AtOnce")
                                      : std::string("AfterThreeSeconds");
                         });

// With --rejoin_grace the run waits for a lost daemon instead of going on
// without it: the survivors keep its state and their workers' reconnects
// wait; the daemon restarted within the grace is taken back into the run
// (one re-formation, the group whole again), so the survivors' workers
// rejoin once, at N.
TEST(Reform, WithARejoinGraceTheRunWaitsForTheRestartedDaemon) {
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  cluster.StartCoordinatorWith("coordinator", {"--rejoin_grace=30s"});
  cluster.StartDaemons();
  constexpr int64_t kSteps = 600;
  const std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                          "--step_delay=5ms", "--timeout=60s"};
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  KillVictimAndItsWorker(cluster, workers);
  proto::JobStatus status;
  ASSERT_TRUE(AwaitVictimLost(cluster, &status)) << cluster.ServerLogs();
  // LOST, within its grace: the group waits for it.
  EXPECT_EQ(status.group_epoch(), 1u);
  EXPECT_EQ(status.current_run().run_id(), 1u);
  cluster.StartDaemon(kVictim, {});
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(30),
      [](const proto::JobStatus& s) {
        return s.group_epoch() == 2 && s.group_size() == kDaemons &&
               s.healthy_nodes() == kDaemons && s.current_run().run_id() == 1;
      },
      &status))
      << "daemon " << kVictim << " was not taken back into run 1\n"
      << cluster.ServerLogs();
  AwaitGroup(cluster, {0, 1, 2}, 2, kDaemons);
  workers[kVictim] = cluster.StartWorker(kVictim, 0, flags);
  std::string params;
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &params);
    if (d == kVictim) continue;
    // Rejoined once, in the whole group.
    ExpectRejoinedNothingLost(r);
    EXPECT_EQ(r.err.find("rejoined run 1 at step"),
              r.err.rfind("rejoined run 1 at step"))
        << r.err;
    EXPECT_THAT(r.err, HasSubstr(" of 3;")) << r.err;
  }
  ExpectRunFinished(cluster, kDaemons, kSteps);
}

// Past the grace, a daemon that did not come back is dropped and the run
// goes on without it, from the state the survivors kept meanwhile.
TEST(Reform, PastTheRejoinGraceTheRunGoesOnWithoutTheDaemon) {
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  const pid_t coordinator =
      cluster.StartCoordinatorWith("coordinator", {"--rejoin_grace=3s"});
  cluster.StartDaemons();
  constexpr int64_t kSteps = 300;
  const std::vector<std::string> flags = {absl::StrCat("--steps=", kSteps),
                                          "--step_delay=5ms", "--timeout=30s"};
  std::vector<pid_t> workers = StartTraining(cluster, flags, 5);
  cluster.Kill(cluster.daemon_pid(kVictim), SIGKILL);
  std::string params;
  for (int d : {0, 2}) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &params);
    ExpectRejoinedNothingLost(r);
    EXPECT_THAT(r.err, HasSubstr(" of 2;")) << r.err;
  }
  ExpectRunFinished(cluster, kDaemons - 1, kSteps);
  EXPECT_THAT(cluster.Stderr(coordinator),
              HasSubstr("it keeps its rank for 3s, --rejoin_grace"));
}

// Asynchronous SGD (bounded staleness) runs the synchronous step's engine
// with workers computing on parameters up to s versions old: a daemon
// killed mid-run, the run goes on at N-1 the same way, every survivor's
// worker rejoins and they end bit-identical.
TEST(Reform, AsyncSgdGoesOnWithoutALostDaemon) {
  ClusterOptions options = Options();
  options.mode = "async_sgd";
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  cluster.StartCoordinatorWith("coordinator", {"--staleness=1"});
  cluster.StartDaemons();
  const std::vector<pid_t> workers = TrainAndKill(
      cluster,
      {"--steps=400", "--step_delay=5ms", "--timeout=20s", "--staleness=1"});
  std::string first;
  for (int d : {0, 2}) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &first);
    EXPECT_THAT(r.err, HasSubstr("rejoined run 1 at step")) << r.err;
    EXPECT_THAT(r.err, HasSubstr(" of 2;")) << r.err;
  }
  ExpectRunFinished(cluster, /*group_size=*/0, /*steps=*/400);
}

// A second daemon killed as soon as the coordinator re-formed the group
// without the first (while the survivors form the new data plane and move
// the state, or just after): the group re-forms again and the run still
// goes on, from the state the last plane that served handed over, with no
// acknowledged update lost.
TEST(Reform, ASecondDaemonLostWhileTheGroupReFormsTheRunStillGoesOn) {
  ClusterOptions options = Options();
  options.daemons = 5;
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = TrainAndKill(
      cluster, {"--steps=400", "--step_delay=5ms", "--timeout=20s"}, 1);
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(20),
      [](const proto::JobStatus& s) { return s.group_epoch() >= 2; }, &status))
      << cluster.ServerLogs();
  cluster.Kill(cluster.daemon_pid(3), SIGKILL);
  std::string first;
  for (int d : {0, 2, 4}) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &first);
    ExpectRejoinedNothingLost(r);
  }
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) {
        return s.recent_runs_size() >= 1 && s.group_size() == 3;
      },
      &status));
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED)
      << status.recent_runs(0).error();
  EXPECT_EQ(status.recent_runs(0).steps(), 400);
}

// Daemons 1 and 2 (a daemon and its buddy: ranks are numbered by hostname)
// killed together once every node ran `iterations`, on a 5-daemon momentum
// job whose coordinator has `coordinator_flags` (its durable
// checkpoints): that shard has no copy left in memory. The run still goes
// on, from the newest version every daemon wrote: an explicit rollback
// (the workers are told their next step, behind what was acknowledged),
// never wrong values; the survivors end bit-identical and the run
// finishes all its steps. Returns the version it went on from, the same
// on every survivor.
int64_t LoseADaemonAndItsBuddy(
    const std::vector<std::string>& coordinator_flags, int64_t iterations) {
  ClusterOptions options = Options();
  options.daemons = 5;
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/checkpoints");
  std::vector<std::string> flags = {absl::StrCat("--checkpoint_dir=", dir)};
  flags.insert(flags.end(), coordinator_flags.begin(), coordinator_flags.end());
  cluster.StartCoordinatorWith("coordinator", flags);
  cluster.StartDaemons();
  const std::vector<pid_t> workers = StartTraining(
      cluster, {"--steps=300", "--step_delay=5ms", "--timeout=20s"},
      iterations);
  cluster.Kill(cluster.daemon_pid(1), SIGKILL);
  cluster.Kill(cluster.daemon_pid(2), SIGKILL);
  std::string first;
  int64_t version = -1;
  for (int d : {0, 3, 4}) {
    const ProcessResult r = WaitFinished(cluster, workers[d], d, &first);
    // Told: the step it goes on from is a checkpointed one, behind what
    // was acknowledged.
    const int64_t resumed = NumberAfter(r.err, "rejoined run 1 at step ");
    const int64_t acknowledged =
        NumberAfter(r.err, "acknowledged through step ");
    EXPECT_GT(resumed, 0) << r.err;
    if (version < 0) version = resumed;
    EXPECT_EQ(resumed, version) << "daemon " << d << ": " << r.err;
    // Behind what was acknowledged (told as lost), or right after it when
    // the newest checkpoint was of the last committed step.
    EXPECT_LE(resumed, acknowledged + 1) << r.err;
    if (resumed <= acknowledged) {
      EXPECT_THAT(r.err, HasSubstr("ACKNOWLEDGED UPDATES LOST")) << r.err;
    }
    EXPECT_THAT(r.err, HasSubstr(" of 3;")) << r.err;
    EXPECT_THAT(
        cluster.Stderr(cluster.daemon_pid(d)),
        HasSubstr(absl::StrCat(
            "goes on from its durable checkpoint of version ", resumed)));
    EXPECT_EQ(Metric(cluster.metrics_port(d),
                     "starling_node_checkpoint_restores_total"),
              1);
  }
  ExpectRunFinished(cluster, /*group_size=*/3, /*steps=*/300);
  return version;
}

TEST(Reform, ADaemonAndItsBuddyLostGoOnFromTheDurableCheckpoint) {
  constexpr int kEvery = 20;
  const int64_t version = LoseADaemonAndItsBuddy(
      {absl::StrCat("--checkpoint_every_steps=", kEvery)}, kEvery + 10);
  EXPECT_EQ(version % kEvery, 0);
}

// Checkpoints by wall-clock time: each daemon's clock says "due" at its
// own moment, but the step's vote makes every daemon write the same
// version, so a version is whole to go on from.
TEST(Reform, CheckpointsByTimeAreOfOneVersionOnEveryDaemon) {
  const int64_t version =
      LoseADaemonAndItsBuddy({"--checkpoint_interval=200ms"}, 150);
  EXPECT_GT(version, 0);
}

// The whole cluster killed (-9: the coordinator, every daemon, every
// worker) and started again (the coordinator on its --state_file): the
// next run goes on from the newest version every daemon checkpointed,
// its workers told where, and ends bit for bit where an uninterrupted run
// of as many steps ends.
TEST(Reform, AWholeClusterRestartGoesOnFromTheDurableCheckpoint) {
  ClusterOptions options = Options();
  options.optimizer = "momentum";
  NodeCluster cluster(options);
  const std::string tmp = std::getenv("TEST_TMPDIR");
  constexpr int kEvery = 20;
  const std::vector<std::string> flags = {
      absl::StrCat("--state_file=", tmp, "/whole.state"),
      absl::StrCat("--checkpoint_dir=", tmp, "/whole-checkpoints"),
      absl::StrCat("--checkpoint_every_steps=", kEvery)};
  const std::vector<std::string> worker_flags = {
      "--steps=200", "--step_delay=5ms", "--timeout=20s"};
  const pid_t coordinator = cluster.StartCoordinatorWith("coordinator", flags);
  cluster.StartDaemons();
  std::vector<pid_t> workers = StartTraining(cluster, worker_flags, 3 * kEvery);
  cluster.Kill(coordinator, SIGKILL);
  for (int d = 0; d < kDaemons; ++d) {
    cluster.Kill(cluster.daemon_pid(d), SIGKILL);
  }
  for (pid_t w : workers) cluster.Kill(w, SIGKILL);
  cluster.Wait(coordinator, absl::Seconds(10));
  for (int d = 0; d < kDaemons; ++d) {
    cluster.Wait(cluster.daemon_pid(d), absl::Seconds(10));
  }
  for (pid_t w : workers) cluster.Wait(w, absl::Seconds(10));

  // Everything again, with the same flags.
  cluster.StartCoordinatorWith("coordinator2", flags);
  for (int d = 0; d < kDaemons; ++d) cluster.StartDaemon(d, {});
  workers.clear();
  for (int d = 0; d < kDaemons; ++d) {
    workers.push_back(cluster.StartWorker(d, 0, worker_flags));
  }
  std::string resumed_params;
  int64_t version = -1;
  for (int d = 0; d < kDaemons; ++d) {
    WaitFinished(cluster, workers[d], d, &resumed_params);
    const std::string log = cluster.Stderr(cluster.daemon_pid(d));
    const int64_t v =
        NumberAfter(log, "goes on from run 1's durable checkpoint of version ");
    EXPECT_GE(v, 2 * kEvery) << log;
    EXPECT_EQ(v % kEvery, 0) << log;
    if (version < 0) version = v;
    EXPECT_EQ(v, version) << "daemon " << d;
  }
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) {
        return s.recent_runs_size() >= 2 && s.recent_runs(0).run_id() == 2;
      },
      &status))
      << cluster.ServerLogs();
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED)
      << status.recent_runs(0).error();
  EXPECT_EQ(status.recent_runs(1).state(), proto::RunStatus::STATE_FAILED);
  EXPECT_EQ(status.recent_runs(0).steps(), 200);

  // The resumed run's first checkpoint is where it began (a second restart
  // before its next one goes on from there), then one every kEvery steps:
  // versions V, V + kEvery, ..., 200 on every daemon (written in the
  // background: waited for, bounded).
  const double want = (200 - version) / kEvery + 1;
  for (int d = 0; d < kDaemons; ++d) {
    double written = -1;
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up &&
           (written = Metric(cluster.metrics_port(d),
                             "starling_node_checkpoints_written_total")) <
               want) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(written, want) << "daemon " << d;
  }

  // The previous run finished: the next begins afresh, and its 200 steps
  // end where the resumed run's did.
  workers.clear();
  for (int d = 0; d < kDaemons; ++d) {
    workers.push_back(cluster.StartWorker(d, 0, worker_flags));
  }
  for (int d = 0; d < kDaemons; ++d) {
    WaitFinished(cluster, workers[d], d, &resumed_params);
  }
}

// Without replicas the lost shard has no copy: the run fails on every
// node, naming the lost daemon, and the next run trains at N-1.
TEST(Reform, WithoutReplicasADaemonKilledMidRunEndsTheRun) {
  NodeCluster cluster(Options());
  cluster.StartCoordinatorWith("coordinator", {"--replicas=0"});
  cluster.StartDaemons();
  const std::vector<pid_t> workers = TrainAndKill(
      cluster, {"--steps=100000", "--step_delay=5ms", "--timeout=20s"});
  for (int d = 0; d < kDaemons; ++d) {
    const ProcessResult r = cluster.Wait(workers[d], absl::Seconds(30));
    ASSERT_FALSE(r.timed_out) << "worker of daemon " << d << " hung\n"
                              << cluster.ServerLogs();
    EXPECT_EQ(r.exit_code, 1) << "daemon " << d;
    if (d != kVictim) {
      // Named: the peer's loss on the data plane, or the re-formation.
      EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr(absl::StrCat(
                                              "rank ", kVictim, " (127.0.0.1:",
                                              cluster.data_port(kVictim))),
                                          HasSubstr("the group re-formed")))
          << "daemon " << d;
      EXPECT_THAT(r.err, HasSubstr("run 1 did not go on")) << r.err;
    }
  }
  AwaitGroup(cluster, {0, 2}, 2, kDaemons - 1);
  TrainOn(cluster, {0, 2});
  // The failed run and the re-formation are in the job's history.
  proto::JobStatus status;
  ASSERT_TRUE(cluster.WaitForJob(
      absl::Seconds(10),
      [](const proto::JobStatus& s) { return s.recent_runs_size() >= 2; },
      &status));
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
  EXPECT_EQ(status.recent_runs(1).state(), proto::RunStatus::STATE_FAILED);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
