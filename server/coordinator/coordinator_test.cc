#include "server/coordinator/coordinator.h"

#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/clock.h"
#include "server/base/logging.h"
#include "server/base/status_matchers.h"
#include "server/metrics/promtool_check.h"
#include "server/metrics/text_format.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr uint64_t kParameters = 1000003;  // prime: shards differ in size

CoordinatorOptions TestOptions(int nodes) {
  CoordinatorOptions options;
  options.job_id = "job-a";
  options.expected_nodes = nodes;
  options.parameter_count = kParameters;
  options.optimizer = "adam";
  options.partitions_per_epoch = 40;
  options.epochs = 2;
  options.iterations_per_schedule = 4;
  // A LOST member keeps its rank (re-formation: coordinator_reform_test).
  options.rejoin_grace = absl::Hours(1);
  return options;
}

proto::JoinRequest JoinRequestFor(int i, int local_workers = 1) {
  proto::JoinRequest request;
  request.set_job_id("job-a");
  request.set_hostname(absl::StrCat("node-", i));
  request.set_data_address(absl::StrCat("10.0.0.", i, ":29500"));
  request.set_admin_address(absl::StrCat("10.0.0.", i, ":29501"));
  request.set_version(kStarlingVersion);
  request.mutable_capabilities()->set_local_workers(local_workers);
  return request;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

class CoordinatorTest : public ::testing::Test {
 protected:
  void Create(int nodes) {
    ASSERT_OK_AND_ASSIGN(
        coordinator_,
        Coordinator::Create(TestOptions(nodes), &clock_, &registry_));
  }

  // Joins nodes 0..n-1 concurrently (in reverse order of hostname, to show
  // that ranks do not follow arrival) and returns their answers by node.
  std::vector<absl::StatusOr<proto::JoinResponse>> JoinAll(int n) {
    std::vector<absl::StatusOr<proto::JoinResponse>> responses(
        n, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = n - 1; i >= 0; --i) {
      threads.emplace_back([this, i, &responses] {
        responses[i] = coordinator_->Join(JoinRequestFor(i), Soon());
      });
    }
    for (std::thread& t : threads) t.join();
    return responses;
  }

  proto::HeartbeatRequest Beat(int rank, uint64_t iteration = 0) {
    proto::HeartbeatRequest request;
    request.set_job_id("job-a");
    request.set_rank(rank);
    request.set_group_epoch(1);
    request.set_iteration(iteration);
    return request;
  }

  double Failures() {
    for (const metrics::FamilySnapshot& f : registry_.Collect()) {
      if (f.name == "starling_coordinator_node_failures_total") {
        return f.series.at(0).value;
      }
    }
    return -1;
  }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, FourNodesGetRanksPeersAndAShardMapCoveringAll) {
  Create(4);
  const auto responses = JoinAll(4);
  std::set<int> ranks;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK(responses[i].status());
    const proto::JoinResponse& r = *responses[i];
    ranks.insert(r.rank());
    EXPECT_EQ(r.rank(), i) << "ranks follow hostnames, not arrival";
    EXPECT_EQ(r.group_size(), 4);
    EXPECT_EQ(r.group_epoch(), 1u);
    // Every member gets the group's key (the same one, below): 32 random
    // bytes its data-plane peers prove they know.
    EXPECT_EQ(r.group_key().size(), 32u);
    EXPECT_NE(r.group_key(), std::string(32, '\0'));
    // Every node sees the same peers, index = rank.
    ASSERT_EQ(r.peers_size(), 4);
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(r.peers(p).rank(), p);
      EXPECT_EQ(r.peers(p).hostname(), absl::StrCat("node-", p));
      EXPECT_EQ(r.peers(p).data_address(),
                absl::StrCat("10.0.0.", p, ":29500"));
      EXPECT_EQ(r.peers(p).admin_address(),
                absl::StrCat("10.0.0.", p, ":29501"));
      EXPECT_EQ(r.peers(p).health(), proto::NODE_HEALTH_HEALTHY);
    }
    // Identical answers but for the rank.
    proto::JoinResponse same = r;
    same.set_rank(0);
    EXPECT_EQ(same.SerializeAsString(), responses[0]->SerializeAsString());
    // The shard map covers [0, kParameters) exactly, first count % N ranks
    // one element larger.
    ASSERT_EQ(r.shard_map_size(), 4);
    uint64_t next = 0;
    for (int s = 0; s < 4; ++s) {
      EXPECT_EQ(r.shard_map(s).rank(), s);
      EXPECT_EQ(r.shard_map(s).begin_element(), next);
      const uint64_t size = r.shard_map(s).end_element() - next;
      EXPECT_EQ(size, kParameters / 4 + (s < kParameters % 4 ? 1 : 0));
      next = r.shard_map(s).end_element();
    }
    EXPECT_EQ(next, kParameters);
    EXPECT_EQ(r.config().iterations_per_schedule(), 4);
    EXPECT_EQ(r.config().mode(), proto::JobConfig::MODE_SYNC_SGD);
    EXPECT_EQ(r.config().optimizer(), "adam");
    EXPECT_EQ(r.config().parameter_count(), kParameters);
    EXPECT_EQ(r.config().heartbeat_timeout_ms(), 5000);
    EXPECT_EQ(r.config().heartbeat_interval_ms(), 250);
  }
  EXPECT_EQ(ranks.size(), 4u);
}

TEST_F(CoordinatorTest, DefaultJobConfig) {
  CoordinatorOptions options;
  options.job_id = "job-a";
  options.expected_nodes = 1;
  ASSERT_OK_AND_ASSIGN(auto coordinator,
                       Coordinator::Create(options, &clock_, &registry_));
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse r,
                       coordinator->Join(JoinRequestFor(0), Soon()));
  EXPECT_EQ(r.config().iterations_per_schedule(), 16);
  EXPECT_EQ(r.config().collective_timeout_ms(), 30000);
  EXPECT_EQ(r.config().dtype(), proto::DATA_TYPE_FLOAT32);
}

TEST_F(CoordinatorTest, VersionMismatchNamesBothVersions) {
  Create(2);
  proto::JoinRequest request = JoinRequestFor(0);
  request.set_version("0.0.9");
  EXPECT_THAT(coordinator_->Join(request, Soon()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "node node-0 (10.0.0.0:29500) runs starling 0.0.9, "
                       "coordinator runs 0.1.0"));
}

TEST_F(CoordinatorTest, WrongJobIdIsRefused) {
  Create(2);
  proto::JoinRequest request = JoinRequestFor(0);
  request.set_job_id("job-b");
  EXPECT_THAT(coordinator_->Join(request, Soon()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "join from node node-0 (10.0.0.0:29500) names job "
                       "'job-b', but this coordinator runs job 'job-a'"));
}

TEST_F(CoordinatorTest, JoinToAFullGroupIsRefusedButARetryIsAnswered) {
  Create(1);
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse first,
                       coordinator_->Join(JoinRequestFor(0), Soon()));
  EXPECT_THAT(coordinator_->Join(JoinRequestFor(1), Soon()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("job 'job-a' has its full group of 1 nodes "
                                 "(group epoch 1, --expected_nodes); node "
                                 "node-1 (10.0.0.1:29500) cannot join")));
  // The same node asking again (its answer was lost) gets it again.
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse again,
                       coordinator_->Join(JoinRequestFor(0), Soon()));
  EXPECT_EQ(again.SerializeAsString(), first.SerializeAsString());
  // Once it heartbeats it has its answer: a join in its name once it fell
  // silent (two heartbeat periods) is the node restarted, taken back in a
  // new group epoch with a new key (the old one is never handed out
  // again).
  proto::HeartbeatRequest beat;
  beat.set_job_id("job-a");
  beat.set_rank(0);
  beat.set_group_epoch(first.group_epoch());
  ASSERT_OK(coordinator_->Heartbeat(beat).status());
  clock_.Advance(2 * HeartbeatInterval(coordinator_->options()));
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse restarted,
                       coordinator_->Join(JoinRequestFor(0), Soon()));
  EXPECT_EQ(restarted.group_epoch(), 2u);
  EXPECT_EQ(restarted.rank(), 0);
  EXPECT_NE(restarted.group_key(), first.group_key());
}

// What a node calls itself reaches status, logs and terminals: a hostname
// that is not one (an escape sequence, a space, 254 bytes) or an address
// that is none is refused, the error quoting it printable; the group
// still forms with proper nodes.
TEST_F(CoordinatorTest, JoinsWithHostnamesOrAddressesThatAreNoneAreRefused) {
  Create(1);
  const struct {
    const char* hostname;
    const char* data_address;
    const char* admin_address;
    const char* error;
  } cases[] = {
      {"node\x1b[2J", "10.0.0.9:29500", "", "the hostname must be at most 253"},
      {"node 9", "10.0.0.9:29500", "", "the hostname must be"},
      {"", "10.0.0.9:29500", "", "must give a hostname"},
      {"node-9", "10.0.0.9", "",
       "its data address '10.0.0.9' is not HOST:PORT"},
      {"node-9", "10.0.0.9:0", "", "is not HOST:PORT with a port in 1..65535"},
      {"node-9", "10.0.0.9:29500", "evil\x07:1", "its admin address 'evil?:1'"},
  };
  for (const auto& c : cases) {
    proto::JoinRequest join = JoinRequestFor(9);
    join.set_hostname(c.hostname);
    join.set_data_address(c.data_address);
    join.set_admin_address(c.admin_address);
    const absl::StatusOr<proto::JoinResponse> joined =
        coordinator_->Join(join, Soon());
    EXPECT_THAT(joined.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr(c.error)))
        << c.hostname << " " << c.data_address;
    EXPECT_EQ(joined.status().message().find('\x1b'), std::string::npos);
  }
  proto::JoinRequest long_name = JoinRequestFor(9);
  long_name.set_hostname(std::string(254, 'a'));
  EXPECT_THAT(coordinator_->Join(long_name, Soon()).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(coordinator_->Join(JoinRequestFor(0), Soon()).status());
}

TEST_F(CoordinatorTest, JoinPastItsDeadlineSaysHowManyJoined) {
  Create(3);
  EXPECT_THAT(coordinator_->Join(JoinRequestFor(0),
                                 absl::Now() + absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 3 nodes have joined (node-0)")));
  // The node that gave up left the rendezvous.
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_FALSE(status.formed());
  EXPECT_THAT(status.nodes(), IsEmpty());
}

TEST_F(CoordinatorTest, DuplicateWaitingAddressAndCancellation) {
  Create(2);
  std::atomic<bool> cancel{false};
  absl::StatusOr<proto::JoinResponse> waiting = absl::UnknownError("not run");
  std::thread first([&] {
    waiting = coordinator_->Join(JoinRequestFor(0), Soon(),
                                 [&] { return cancel.load(); });
  });
  // Status shows the waiting node once it is in (polling an observable
  // state, bounded by the test's deadline).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (coordinator_->GetJobStatus({})->nodes_size() == 0 &&
         absl::Now() < give_up) {
    std::this_thread::yield();
  }
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  ASSERT_EQ(status.nodes_size(), 1);
  EXPECT_EQ(status.nodes(0).peer().rank(), -1);
  EXPECT_EQ(status.nodes(0).peer().health(), proto::NODE_HEALTH_JOINING);
  EXPECT_THAT(
      coordinator_->Join(JoinRequestFor(0), Soon()),
      StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("10.0.0.0:29500")));
  cancel = true;
  first.join();
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kCancelled));
}

TEST_F(CoordinatorTest, ShutdownReleasesWaitingJoins) {
  Create(2);
  absl::StatusOr<proto::JoinResponse> waiting = absl::UnknownError("not run");
  std::thread first(
      [&] { waiting = coordinator_->Join(JoinRequestFor(0), Soon()); });
  coordinator_->Shutdown();
  first.join();
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("shutting down")));
}

TEST_F(CoordinatorTest, SilentNodeIsMarkedLostOnceAndSurvivorsLearnIt) {
  Create(4);
  for (const auto& r : JoinAll(4)) ASSERT_OK(r.status());
  std::vector<std::string> logged;
  SetLogSinkForTesting([&logged](LogSeverity severity, absl::string_view line) {
    if (severity == LogSeverity::kError) logged.emplace_back(line);
  });

  // Every rank but 2 heartbeats each second; rank 2 goes silent.
  for (int second = 1; second <= 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 1, 3}) {
      ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse r,
                           coordinator_->Heartbeat(Beat(rank)));
      if (second <= 5) {
        EXPECT_FALSE(r.degraded()) << "second " << second;
        EXPECT_THAT(r.lost_ranks(), IsEmpty());
      } else {
        EXPECT_TRUE(r.degraded());
        EXPECT_THAT(r.lost_ranks(), ElementsAre(2));
      }
    }
  }
  EXPECT_THAT(coordinator_->DetectFailures(), IsEmpty());  // already marked
  SetLogSinkForTesting(nullptr);

  EXPECT_EQ(Failures(), 1);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_THAT(logged[0], HasSubstr("rank 2 (node-2, 10.0.0.2:29500) lost: no "
                                   "heartbeat for 6s (timeout 5s)"));

  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_TRUE(status.degraded());
  EXPECT_EQ(status.healthy_nodes(), 3);
  EXPECT_EQ(status.nodes(2).peer().health(), proto::NODE_HEALTH_LOST);
  EXPECT_DOUBLE_EQ(status.nodes(2).heartbeat_age_seconds(), 6);
  EXPECT_EQ(status.nodes(0).peer().health(), proto::NODE_HEALTH_HEALTHY);
  EXPECT_THAT(status.last_error(), HasSubstr("rank 2 (node-2"));

  // While lost, its schedule requests are refused.
  proto::GetScheduleRequest schedule;
  schedule.set_job_id("job-a");
  schedule.set_rank(2);
  EXPECT_THAT(coordinator_->GetSchedule(schedule),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("marked lost")));

  // It is not refused forever: a heartbeat with the right group epoch makes
  // it healthy again, and the group whole, in a new epoch in which it keeps
  // its rank (its peers dropped their connections to it: the data plane
  // forms again). Its heartbeat is then of the old epoch: re-register.
  std::vector<std::string> warnings;
  SetLogSinkForTesting(
      [&warnings](LogSeverity severity, absl::string_view line) {
        if (severity == LogSeverity::kWarning) warnings.emplace_back(line);
      });
  EXPECT_THAT(
      coordinator_->Heartbeat(Beat(2)),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("runs group epoch 2")));
  SetLogSinkForTesting(nullptr);
  ASSERT_GE(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("rank 2 (node-2, 10.0.0.2:29500) is back "
                                     "after 6s without a heartbeat"));
  ASSERT_OK_AND_ASSIGN(status, coordinator_->GetJobStatus({}));
  EXPECT_FALSE(status.degraded());
  EXPECT_EQ(status.group_epoch(), 2u);
  EXPECT_EQ(status.healthy_nodes(), 4);
  EXPECT_EQ(status.nodes(2).peer().hostname(), "node-2");
  EXPECT_EQ(status.nodes(2).peer().health(), proto::NODE_HEALTH_HEALTHY);
  schedule.set_group_epoch(2);
  EXPECT_OK(coordinator_->GetSchedule(schedule).status());
  // The loss stays the job's last error, and counted once.
  EXPECT_THAT(status.last_error(), HasSubstr("rank 2 (node-2"));
  EXPECT_EQ(Failures(), 1);

  // A heartbeat from another group epoch is not from this group.
  proto::HeartbeatRequest stale = Beat(2);
  stale.set_group_epoch(7);
  EXPECT_THAT(coordinator_->Heartbeat(stale),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("of group epoch 7, but this coordinator runs "
                                 "group epoch 2")));
}

TEST_F(CoordinatorTest, DetectFailuresAloneFindsASilentGroup) {
  Create(2);
  for (const auto& r : JoinAll(2)) ASSERT_OK(r.status());
  clock_.Advance(absl::Seconds(5));
  EXPECT_THAT(coordinator_->DetectFailures(), IsEmpty());  // not past yet
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(coordinator_->DetectFailures(), ElementsAre(0, 1));
  EXPECT_EQ(Failures(), 2);
}

TEST_F(CoordinatorTest, CallsFromAGroupThisCoordinatorDoesNotKnowAreNotFound) {
  Create(2);
  // E.g. the coordinator restarted: the node must re-register.
  EXPECT_THAT(coordinator_->Heartbeat(Beat(0)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("this coordinator has no group yet (0 of 2 "
                                 "nodes have joined); a member of a running "
                                 "group re-registers (Rejoin)")));
}

TEST_F(CoordinatorTest, HeartbeatsAreAcceptedFromJoinWhileTheDataPlaneForms) {
  Create(2);
  for (const auto& r : JoinAll(2)) ASSERT_OK(r.status());
  // Forming the data plane takes a while; heartbeats keep the members in.
  for (int second = 1; second <= 20; ++second) {
    clock_.Advance(absl::Seconds(1));
    for (int rank : {0, 1}) ASSERT_OK(coordinator_->Heartbeat(Beat(rank)));
  }
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.healthy_nodes(), 2);
  EXPECT_FALSE(status.degraded());
  EXPECT_EQ(Failures(), 0);
}

TEST_F(CoordinatorTest, ScheduleGivesKIterationsCoveringEachEpochOnce) {
  Create(4);
  for (const auto& r : JoinAll(4)) ASSERT_OK(r.status());
  // 40 partitions over 4 workers: 10 iterations per epoch, 2 epochs.
  std::map<uint64_t, std::multiset<uint64_t>> read;
  for (int rank = 0; rank < 4; ++rank) {
    proto::GetScheduleRequest request;
    request.set_job_id("job-a");
    request.set_rank(rank);
    uint64_t next = 0;
    bool done = false;
    while (!done) {
      request.set_next_iteration(next);
      ASSERT_OK_AND_ASSIGN(proto::Schedule s,
                           coordinator_->GetSchedule(request));
      EXPECT_EQ(s.first_iteration(), next);
      EXPECT_EQ(s.iteration_count(), next + 4 <= 20 ? 4 : 20 - next);
      for (const proto::ScheduledIteration& it : s.iterations()) {
        EXPECT_EQ(it.iteration(), next++);
        for (const auto& a : it.assignments()) {
          read[it.epoch()].insert(a.partitions().begin(), a.partitions().end());
        }
      }
      done = s.done();
    }
    EXPECT_EQ(next, 20u);
  }
  ASSERT_EQ(read.size(), 2u);
  for (const auto& [epoch, partitions] : read) {
    std::multiset<uint64_t> expected;
    for (uint64_t p = 0; p < 40; ++p) expected.insert(p);
    EXPECT_EQ(partitions, expected) << "epoch " << epoch;
  }
}

TEST_F(CoordinatorTest, StepReportsShowInStatusAndMetrics) {
  Create(2);
  for (const auto& r : JoinAll(2)) ASSERT_OK(r.status());
  proto::StepReport report;
  report.set_job_id("job-a");
  report.set_rank(0);
  report.set_iteration(12);
  report.set_compute_seconds(0.3);
  report.set_communication_seconds(0.1);
  report.set_loss(1.25);
  ASSERT_OK(coordinator_->ReportStep(report));
  report.set_rank(1);
  report.set_error("all-reduce step 3 timed out waiting for rank 0");
  ASSERT_OK(coordinator_->ReportStep(report));
  report.set_compute_seconds(-1);
  EXPECT_THAT(coordinator_->ReportStep(report),
              StatusIs(absl::StatusCode::kInvalidArgument));
  report.set_rank(7);
  report.set_compute_seconds(1);
  EXPECT_THAT(
      coordinator_->ReportStep(report),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks 0..1")));

  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.iteration(), 12u);
  EXPECT_EQ(status.epoch(), 0u);  // 20 iterations per epoch with 2 workers
  EXPECT_EQ(status.iterations_per_epoch(), 20u);
  EXPECT_EQ(status.nodes(1).last_error(),
            "all-reduce step 3 timed out waiting for rank 0");
  EXPECT_EQ(status.last_error(),
            "rank 1 (node-1, 10.0.0.1:29500) iteration 12: all-reduce step 3 "
            "timed out waiting for rank 0");
  // Float32 shards; Adam keeps two state slots.
  const uint64_t shard0 = (kParameters / 2 + 1) * 4;
  EXPECT_EQ(status.nodes(0).shard_bytes(), shard0);
  EXPECT_EQ(status.nodes(0).optimizer_state_bytes(), 2 * shard0);

  const std::string text = metrics::EncodeTextFormat(registry_.Collect());
  EXPECT_THAT(text, HasSubstr("starling_coordinator_loss{rank=\"0\"} 1.25\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_compute_seconds_total{"
                              "rank=\"0\"} 0.3\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_step_errors_total{"
                              "rank=\"1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_group_size 2\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_step_duration_seconds_"
                              "count{rank=\"0\"} 1\n"));
}

TEST_F(CoordinatorTest, ReportedSizesReplaceExpectedOnes) {
  Create(1);
  for (const auto& r : JoinAll(1)) ASSERT_OK(r.status());
  proto::HeartbeatRequest beat = Beat(0, 3);
  beat.set_shard_bytes(111);
  beat.set_optimizer_state_bytes(222);
  ASSERT_OK(coordinator_->Heartbeat(beat).status());
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.nodes(0).shard_bytes(), 111u);
  EXPECT_EQ(status.nodes(0).optimizer_state_bytes(), 222u);
  EXPECT_EQ(status.nodes(0).last_iteration(), 3u);
}

TEST_F(CoordinatorTest, StatusShowsEachNodesTransportFromItsLastHeartbeat) {
  Create(2);
  for (const auto& r : JoinAll(2)) ASSERT_OK(r.status());
  // Before any heartbeat (and from a node that does not report one): not
  // known.
  ASSERT_OK_AND_ASSIGN(proto::JobStatus status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.nodes(0).transport(), "");
  proto::HeartbeatRequest beat = Beat(0);
  beat.set_transport("fabric (verbs;ofi_rxm) to 1 peer");
  ASSERT_OK(coordinator_->Heartbeat(beat).status());
  ASSERT_OK(coordinator_->Heartbeat(Beat(1)).status());
  ASSERT_OK_AND_ASSIGN(status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.nodes(0).transport(), "fabric (verbs;ofi_rxm) to 1 peer");
  EXPECT_EQ(status.nodes(1).transport(), "");
  // Each heartbeat replaces it: a heartbeat without one (the node's plane
  // of this epoch not formed yet) makes it unknown again.
  beat.set_transport("tcp to 1 peer");
  ASSERT_OK(coordinator_->Heartbeat(beat).status());
  ASSERT_OK_AND_ASSIGN(status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.nodes(0).transport(), "tcp to 1 peer");
  ASSERT_OK(coordinator_->Heartbeat(Beat(0)).status());
  ASSERT_OK_AND_ASSIGN(status, coordinator_->GetJobStatus({}));
  EXPECT_EQ(status.nodes(0).transport(), "");
}

TEST_F(CoordinatorTest, StatusForAnotherJobIsRefused) {
  Create(1);
  proto::GetJobStatusRequest request;
  request.set_job_id("job-b");
  EXPECT_THAT(coordinator_->GetJobStatus(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job-b")));
}

TEST_F(CoordinatorTest, BadOptionsAreRefused) {
  CoordinatorOptions options = TestOptions(0);
  EXPECT_THAT(Coordinator::Create(options, &clock_, &registry_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected_nodes")));
  options = TestOptions(2);
  options.optimizer = "lbfgs";
  EXPECT_THAT(Coordinator::Create(options, &clock_, &registry_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown optimizer 'lbfgs'")));
  // What the daemons would refuse after joining is refused at start-up.
  options = TestOptions(2);
  options.mode = proto::JobConfig::MODE_ASYNC_EASGD;
  options.elastic_beta = 2;
  EXPECT_THAT(
      Coordinator::Create(options, &clock_, &registry_).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(": --mode=async_easgd keeps the centre variable")));
  options = TestOptions(2);
  options.learning_rate = std::nan("");
  EXPECT_THAT(Coordinator::Create(options, &clock_, &registry_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--learning_rate=nan")));
}

TEST_F(CoordinatorTest, MetricsPassPromtool) {
  Create(2);
  for (const auto& r : JoinAll(2)) ASSERT_OK(r.status());
  proto::StepReport report;
  report.set_job_id("job-a");
  report.set_compute_seconds(0.02);
  report.set_communication_seconds(0.01);
  ASSERT_OK(coordinator_->ReportStep(report));
  clock_.Advance(absl::Seconds(10));
  coordinator_->DetectFailures();
  const absl::Status status = metrics::CheckWithPromtool(
      metrics::EncodeTextFormat(registry_.Collect()));
  if (absl::IsNotFound(status)) {
    GTEST_SKIP() << "skipping the promtool check: " << status.message();
  }
  EXPECT_OK(status);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
