// "Who is missing", live: a worker that stops (SIGSTOP: a hung process)
// holds its daemon out of the next step's collective. While the other
// daemons wait in it, `starlingctl inflight` names the op (sequence number
// and fingerprint), how long it has waited and the rank it waits for, and
// says what that rank does instead; each waiting daemon's /metrics shows
// one collective in flight missing one rank. When the worker goes on
// (SIGCONT), the op completes and training continues: nothing was lost.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

coordinator::RunResult InFlight(const NodeCluster& cluster) {
  return coordinator::RunBinary(
      {BinaryPath("server/coordinator/starlingctl"), "inflight",
       absl::StrCat("--coordinator=", cluster.coordinator_address()),
       "--timeout=2s"},
      10);
}

TEST(WhoIsMissing, StarlingctlNamesTheRankAStuckCollectiveWaitsFor) {
  ClusterOptions options;
  options.daemons = 3;
  options.local_workers = 1;
  options.parameter_count = 100;
  // Long enough that the op is still waiting when starlingctl looks.
  options.collective_timeout = absl::Seconds(60);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<pid_t> workers = cluster.StartAllWorkers(
      {"--steps=100000", "--step_delay=2ms", "--timeout=90s"});
  proto::NodeStatusReply status;
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(20),
      [](const proto::NodeStatusReply& s) { return s.iteration() >= 5; },
      &status))
      << status.DebugString() << cluster.ServerLogs();

  constexpr int kStuck = 2;
  cluster.Kill(workers[kStuck], SIGSTOP);
  coordinator::RunResult shown;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    shown = InFlight(cluster);
    if (shown.exit_code == 0 &&
        shown.output.find("waits for rank 2 (ranks 0, 1 in it") !=
            std::string::npos) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_THAT(shown.output, HasSubstr("waits for rank 2 (ranks 0, 1 in it"))
      << cluster.ServerLogs();
  std::printf("starlingctl inflight:\n%s", shown.output.c_str());
  // Each waiting rank's row names the op by sequence number and
  // fingerprint; the stuck rank is in no collective.
  EXPECT_THAT(shown.output, HasSubstr(" op "));
  EXPECT_THAT(shown.output, HasSubstr("float32"));
  EXPECT_THAT(shown.output, HasSubstr("waiting for rank 2"));
  EXPECT_THAT(shown.output, HasSubstr("rank 2 (node2) is in no collective"));
  // ... because its one local worker (stopped) sent nothing.
  EXPECT_THAT(shown.output,
              HasSubstr(absl::StrCat("it waits for its local worker 0 ")));
  EXPECT_THAT(shown.output,
              HasSubstr(absl::StrCat("(pid ", workers[kStuck],
                                     "), which sent nothing since its last "
                                     "round")));
  for (int rank : {0, 1}) {
    EXPECT_EQ(
        Metric(cluster.metrics_port(rank), "starling_collective_in_flight"), 1)
        << "rank " << rank;
    EXPECT_EQ(
        Metric(cluster.metrics_port(rank), "starling_collective_missing_ranks"),
        1)
        << "rank " << rank;
    EXPECT_GT(Metric(cluster.metrics_port(rank),
                     "starling_collective_oldest_in_flight_seconds"),
              0)
        << "rank " << rank;
  }
  EXPECT_EQ(
      Metric(cluster.metrics_port(kStuck), "starling_collective_in_flight"), 0);

  // The worker goes on: the op completes, training continues, and the
  // waiting ranks saw rank 2 arrive last.
  cluster.Kill(workers[kStuck], SIGCONT);
  const uint64_t stopped_at = status.iteration();
  ASSERT_TRUE(cluster.WaitForNode(
      0, absl::Seconds(30),
      [stopped_at](const proto::NodeStatusReply& s) {
        return s.iteration() >= stopped_at + 20;
      },
      &status))
      << cluster.ServerLogs();
  EXPECT_GE(Metric(cluster.metrics_port(0),
                   "starling_collective_last_arrivals_total", {"rank=\"2\""}),
            1);
  EXPECT_GT(Metric(cluster.metrics_port(0),
                   "starling_collective_arrival_skew_seconds_sum"),
            0.1);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
