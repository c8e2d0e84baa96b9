// Re-formation: a member LOST past --rejoin_grace is dropped and the group
// re-forms from the others (a new epoch, ranks re-numbered, a new shard map
// and key); a node that joins later (a restarted daemon) is taken in
// between runs; survivors learn their new place by re-registering with
// their old epoch, a dropped member is told to join afresh.
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/clock.h"
#include "server/base/status_matchers.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_test_util.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;

class CoordinatorReformTest : public ::testing::Test {
 protected:
  void Create(int nodes, absl::Duration grace = absl::ZeroDuration(),
              int min_nodes = 1,
              absl::Duration heartbeat_interval = absl::ZeroDuration(),
              int replicas = 1) {
    CoordinatorOptions options = TestOptions(nodes);
    options.replicas = replicas;
    options.rejoin_grace = grace;
    options.min_nodes = min_nodes;
    options.heartbeat_interval = heartbeat_interval;
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, &clock_, &registry_));
  }

  void Form(int nodes) {
    for (auto& r : JoinAll(coordinator_.get(), nodes)) {
      ASSERT_OK(r.status());
      joins_.push_back(*r);
    }
  }

  // Every node in `beating` (node index -> its answer) heartbeats each
  // second for `seconds`; the others are silent.
  void Beat(const std::map<int, proto::JoinResponse>& beating, int seconds) {
    for (int s = 0; s < seconds; ++s) {
      clock_.Advance(absl::Seconds(1));
      for (const auto& [node, join] : beating) {
        (void)coordinator_->Heartbeat(
            coordinator::Beat(join.rank(), join.group_epoch()));
      }
    }
  }

  // What node `node` sends to re-register with the group `join` told it.
  static proto::RejoinRequest RejoinFor(int node,
                                        const proto::JoinResponse& join) {
    proto::RejoinRequest request;
    *request.mutable_node() = JoinRequestFor(node);
    request.set_rank(join.rank());
    request.set_group_epoch(join.group_epoch());
    *request.mutable_peers() = join.peers();
    *request.mutable_shard_map() = join.shard_map();
    return request;
  }

  proto::JobStatus Status() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_OK(status.status());
    return status.ok() ? *status : proto::JobStatus();
  }

  double Counter(const std::string& name) {
    for (const metrics::FamilySnapshot& f : registry_.Collect()) {
      if (f.name == name && !f.series.empty()) return f.series[0].value;
    }
    return -1;
  }

  double Reformations(const std::string& cause) {
    for (const metrics::FamilySnapshot& f : registry_.Collect()) {
      if (f.name != "starling_coordinator_reformations_total") continue;
      for (const auto& series : f.series) {
        if (series.label_values == std::vector<std::string>{cause}) {
          return series.value;
        }
      }
    }
    return 0;
  }

  // Of the group of 3 formed: node 1 falls silent and is dropped (epoch
  // 2); nodes 0 and 2 move to epoch 2 (moved_) and begin run 1 there.
  void DropNode1AndBeginARun() {
    Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
    ASSERT_EQ(Status().group_epoch(), 2u);
    std::vector<proto::BeginRunRequest> begins;
    for (int node : {0, 2}) {
      ASSERT_OK_AND_ASSIGN(proto::JoinResponse moved,
                           coordinator_->Rejoin(RejoinFor(node, joins_[node])));
      proto::BeginRunRequest request = BeginFor(moved.rank());
      request.set_group_epoch(2);
      begins.push_back(request);
      moved_.push_back(moved);
    }
    for (const auto& answer : BeginAll(coordinator_.get(), begins)) {
      ASSERT_OK(answer.status());
    }
  }

  // Run 1 ends (finished, 20 steps) on every node of group epoch 2 that
  // `moved` answered.
  void EndRunOneInEpoch2(const std::vector<proto::JoinResponse>& moved) {
    for (const proto::JoinResponse& join : moved) {
      proto::EndRunRequest end =
          EndFor(join.rank(), 1, proto::RunStatus::STATE_FINISHED, 20);
      end.set_group_epoch(2);
      ASSERT_OK(coordinator_->EndRun(end));
    }
  }

  static absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  std::vector<proto::JoinResponse> joins_;
  std::vector<proto::JoinResponse> moved_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorReformTest, ALostMemberIsDroppedAndTheSurvivorsReNumbered) {
  Create(3);
  Form(3);
  // Node 1 goes silent: LOST after the 5 s timeout, dropped at once.
  Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
  proto::JobStatus status = Status();
  EXPECT_EQ(status.group_epoch(), 2u);
  ASSERT_EQ(status.group_size(), 2);
  EXPECT_EQ(status.nodes(0).peer().hostname(), "node-0");
  EXPECT_EQ(status.nodes(1).peer().hostname(), "node-2");
  EXPECT_FALSE(status.degraded());
  EXPECT_EQ(Reformations("node_lost"), 1);
  EXPECT_THAT(status.reformed_because(),
              HasSubstr("rank 1 (node-1, 10.0.0.1:29500) of group epoch 1 "
                        "dropped: no heartbeat for 6s"));

  // A survivor's calls of the old epoch send it to re-register...
  EXPECT_THAT(coordinator_->Heartbeat(coordinator::Beat(2, 1)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("runs group epoch 2; re-register")));
  proto::GetScheduleRequest schedule;
  schedule.set_job_id("job-a");
  schedule.set_rank(1);
  schedule.set_group_epoch(1);
  EXPECT_THAT(coordinator_->GetSchedule(schedule),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_GE(Counter("starling_coordinator_stale_calls_total"), 2);
  // ...which tells it its place in the new group, with the new key.
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse moved,
                       coordinator_->Rejoin(RejoinFor(2, joins_[2])));
  EXPECT_EQ(moved.group_epoch(), 2u);
  EXPECT_EQ(moved.rank(), 1);
  EXPECT_EQ(moved.group_size(), 2);
  ASSERT_EQ(moved.shard_map_size(), 2);
  EXPECT_EQ(moved.shard_map(0).end_element(),
            moved.shard_map(1).begin_element());
  EXPECT_EQ(moved.group_key().size(), 32u);
  EXPECT_NE(moved.group_key(), joins_[2].group_key());
  // It heartbeats in its new place.
  EXPECT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 2)).status());
  schedule.set_group_epoch(2);
  EXPECT_OK(coordinator_->GetSchedule(schedule).status());

  // The dropped node, waking up, is told it left the group and why.
  EXPECT_THAT(
      coordinator_->Rejoin(RejoinFor(1, joins_[1])),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("rank 1 (node-1, 10.0.0.1:29500) of group "
                               "epoch 1 is not a member of group epoch 2"),
                     HasSubstr("rank 1 (node-1, 10.0.0.1:29500) of group "
                               "epoch 1 dropped: no heartbeat for 6s"),
                     HasSubstr("it joins afresh"))));
}

TEST_F(CoordinatorReformTest, AMemberItsPeersSawVanishIsLostAtItsNextSlot) {
  // Timeout 5 s, heartbeats every 1 s: reported vanished, a member is LOST
  // once 1.25 s passed without its heartbeat, not 5 s.
  Create(3, absl::ZeroDuration(), 1, absl::Seconds(1));
  Form(3);
  Beat({{0, joins_[0]}, {1, joins_[1]}, {2, joins_[2]}}, 1);
  clock_.Advance(absl::Milliseconds(300));
  proto::HeartbeatRequest report = coordinator::Beat(0, 1);
  report.add_peers_vanished(2);
  report.add_peers_vanished(1);  // wrongly: rank 1 is alive
  ASSERT_OK(coordinator_->Heartbeat(report).status());
  EXPECT_EQ(Status().healthy_nodes(), 3);  // not late yet
  clock_.Advance(absl::Milliseconds(500));
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 1)).status());
  clock_.Advance(absl::Milliseconds(500));  // rank 2 silent 1.3 s
  coordinator_->DetectFailures();
  const proto::JobStatus status = Status();
  // Dropped (grace 0): the group re-formed with ranks 0 and 1.
  EXPECT_EQ(status.group_epoch(), 2u);
  ASSERT_EQ(status.group_size(), 2);
  EXPECT_EQ(status.nodes(1).peer().hostname(), "node-1");
  EXPECT_THAT(status.last_error(),
              HasSubstr("rank 2 (node-2, 10.0.0.2:29500) lost: vanished from "
                        "the data plane of rank 0 (node-0, 10.0.0.0:29500) "
                        "and no heartbeat for 1.3s (every 1s)"));
}

TEST_F(CoordinatorReformTest, MembersThatVanishTogetherLeaveInOneReFormation) {
  Create(4, absl::ZeroDuration(), 1, absl::Seconds(1));
  Form(4);
  Beat({{0, joins_[0]}, {1, joins_[1]}, {2, joins_[2]}, {3, joins_[3]}}, 1);
  // Rank 3 heartbeats 400 ms later than rank 2; both die; rank 0 saw both
  // vanish.
  clock_.Advance(absl::Milliseconds(400));
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(3, 1)).status());
  proto::HeartbeatRequest report = coordinator::Beat(0, 1);
  report.add_peers_vanished(2);
  report.add_peers_vanished(3);
  ASSERT_OK(coordinator_->Heartbeat(report).status());
  // 1.3 s after rank 2's last heartbeat it is LOST, but rank 3, still in
  // its slot, is awaited: no re-formation yet.
  clock_.Advance(absl::Milliseconds(900));
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 1)).status());
  proto::JobStatus status = Status();
  EXPECT_EQ(status.group_epoch(), 1u);
  EXPECT_EQ(status.nodes(2).peer().health(), proto::NODE_HEALTH_LOST);
  // Once rank 3 is late too, both leave in one re-formation.
  clock_.Advance(absl::Milliseconds(400));
  coordinator_->DetectFailures();
  status = Status();
  EXPECT_EQ(status.group_epoch(), 2u);
  EXPECT_EQ(status.group_size(), 2);
  EXPECT_EQ(Reformations("node_lost"), 1);
}

TEST_F(CoordinatorReformTest, AMemberBackWithinTheGraceKeepsItsRank) {
  Create(3, absl::Seconds(10));
  Form(3);
  Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
  proto::JobStatus status = Status();
  EXPECT_TRUE(status.degraded());
  EXPECT_EQ(status.group_epoch(), 1u);
  EXPECT_EQ(status.nodes(1).peer().health(), proto::NODE_HEALTH_LOST);
  // Back 7 s after its last heartbeat, within its 10 s grace: whole again,
  // every rank kept, in a new epoch (its peers dropped their connections
  // to it: the data plane forms again).
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(
      coordinator_->Heartbeat(coordinator::Beat(1, 1)),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("runs group epoch 2")));
  status = Status();
  EXPECT_EQ(status.group_epoch(), 2u);
  EXPECT_EQ(status.group_size(), 3);
  EXPECT_EQ(status.healthy_nodes(), 3);
  EXPECT_EQ(Reformations("node_lost"), 0);
  EXPECT_EQ(Reformations("node_back"), 1);
  EXPECT_THAT(status.reformed_because(),
              HasSubstr("rank 1 (node-1, 10.0.0.1:29500) back after 7s"));
  std::map<int, proto::JoinResponse> moved;
  for (int node = 0; node < 3; ++node) {
    ASSERT_OK_AND_ASSIGN(moved[node],
                         coordinator_->Rejoin(RejoinFor(node, joins_[node])));
    EXPECT_EQ(moved[node].rank(), node);
    EXPECT_EQ(moved[node].group_epoch(), 2u);
  }
  // Silent again, past the grace this time: dropped.
  Beat({{0, moved[0]}, {2, moved[2]}}, 6 + 9);
  EXPECT_EQ(Status().group_epoch(), 2u);  // LOST 9 s ago: still in grace
  Beat({{0, moved[0]}, {2, moved[2]}}, 1);
  status = Status();
  EXPECT_EQ(status.group_epoch(), 3u);
  EXPECT_EQ(status.group_size(), 2);
}

// Without replicas (a run that cannot go on with it; with them it is taken
// into the run: ARestartedNodeIsTakenIntoARunThatGoesOn).
TEST_F(CoordinatorReformTest, ARestartedNodeIsTakenBackBetweenRuns) {
  Create(3, absl::ZeroDuration(), 1, absl::ZeroDuration(), /*replicas=*/0);
  Form(3);
  DropNode1AndBeginARun();
  if (HasFatalFailure()) return;
  const proto::JoinResponse a = moved_[0];
  const proto::JoinResponse b = moved_[1];
  // Node 1 comes back (restarted): it waits while run 1 runs.
  absl::StatusOr<proto::JoinResponse> back;
  std::thread joiner(
      [&] { back = coordinator_->Join(JoinRequestFor(1), Soon()); });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.nodes_size() == 3 && s.nodes(2).peer().rank() == -1 &&
           s.nodes(2).peer().health() == proto::NODE_HEALTH_JOINING;
  }));
  EXPECT_EQ(Status().group_epoch(), 2u);
  // The run ends on both: the group re-forms with it.
  EndRunOneInEpoch2({a, b});
  joiner.join();
  ASSERT_OK(back.status());
  EXPECT_EQ(back->group_epoch(), 3u);
  EXPECT_EQ(back->rank(), 1);  // by hostname: node-0, node-1, node-2
  EXPECT_EQ(back->group_size(), 3);
  EXPECT_EQ(Reformations("node_joined"), 1);
  // The others move to epoch 3 in their old order around it.
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse c,
                       coordinator_->Rejoin(RejoinFor(2, b)));
  EXPECT_EQ(c.group_epoch(), 3u);
  EXPECT_EQ(c.rank(), 2);
  EXPECT_EQ(c.group_key(), back->group_key());
}

// Without replicas (with them the run goes on without it:
// AMemberRestartedMidRunWaitsWhileTheRunGoesOnWithoutIt).
TEST_F(CoordinatorReformTest, AMemberThatJoinsAfreshHasRestarted) {
  // Whatever the grace: the member's old process is gone.
  Create(2, absl::Hours(1), 1, absl::ZeroDuration(), /*replicas=*/0);
  for (auto& join : FormAndBeginRunOne(coordinator_.get(), 2)) {
    joins_.push_back(join);
  }
  ASSERT_EQ(joins_.size(), 2u);
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 1)).status());
  // Its old self falls silent (killed): two heartbeat periods later the
  // new one takes its place.
  clock_.Advance(2 * HeartbeatInterval(coordinator_->options()));
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse again,
                       coordinator_->Join(JoinRequestFor(1), Soon()));
  EXPECT_EQ(again.group_epoch(), 2u);
  EXPECT_EQ(again.rank(), 1);
  EXPECT_EQ(again.group_size(), 2);
  const proto::JobStatus status = Status();
  ASSERT_GE(status.recent_runs_size(), 1);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FAILED);
  EXPECT_THAT(status.recent_runs(0).error(),
              HasSubstr("rank 1 (node-1, 10.0.0.1:29500) lost: restarted "
                        "(it joined afresh while a member)"));
  EXPECT_EQ(Reformations("node_lost"), 1);
}

// A Join in the place of a member that is alive (it heartbeats, no peer
// saw it vanish) is held while the member lives and then refused, naming
// it: a process that copies a member's hostname and data address cannot
// take its rank, nor fail its run.
TEST_F(CoordinatorReformTest, AJoinInALiveMembersPlaceIsRefused) {
  Create(2, absl::Hours(1), 1, absl::ZeroDuration(), /*replicas=*/0);
  for (auto& join : FormAndBeginRunOne(coordinator_.get(), 2)) {
    joins_.push_back(join);
  }
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 1)).status());
  const absl::StatusOr<proto::JoinResponse> taken = coordinator_->Join(
      JoinRequestFor(1), absl::Now() + absl::Milliseconds(300));
  EXPECT_THAT(taken.status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("node node-1 (10.0.0.1:29500) cannot "
                                       "take the place of rank 1"),
                             HasSubstr("that member is alive"))));
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.group_epoch(), 1u);
  EXPECT_EQ(status.nodes(1).peer().health(), proto::NODE_HEALTH_HEALTHY);
  EXPECT_EQ(status.current_run().state(), proto::RunStatus::STATE_RUNNING);
  EXPECT_EQ(Reformations("node_lost"), 0);
}

// A member restarted mid-run (systemd's Restart=on-failure, faster than
// the heartbeat timeout): one re-formation drops its old self and takes
// the new one in, and the run goes on with it (the others hold its
// shard's replica and send it its state).
TEST_F(CoordinatorReformTest, AMemberRestartedMidRunIsTakenBackIntoTheRun) {
  Create(3, absl::Hours(1));
  for (auto& join : FormAndBeginRunOne(coordinator_.get(), 3)) {
    joins_.push_back(join);
  }
  ASSERT_EQ(joins_.size(), 3u);
  for (int node = 0; node < 3; ++node) {
    ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(node, 1)).status());
  }
  // Rank 1's old self was killed: its peers saw it vanish.
  proto::HeartbeatRequest seen = coordinator::Beat(0, 1);
  seen.add_peers_vanished(1);
  ASSERT_OK(coordinator_->Heartbeat(seen).status());
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse back,
                       coordinator_->Join(JoinRequestFor(1), Soon()));
  EXPECT_EQ(back.group_epoch(), 2u);
  EXPECT_EQ(back.group_size(), 3);
  EXPECT_EQ(back.rank(), 1);
  EXPECT_EQ(back.carried_run_id(), 1u);
  EXPECT_THAT(back.reformed_because(),
              AllOf(HasSubstr("restarted (it joined afresh while a member)"),
                    HasSubstr("node node-1 (10.0.0.1:29500) taken in")));
  proto::JobStatus status = Status();
  EXPECT_EQ(status.current_run().run_id(), 1u);
  EXPECT_EQ(status.current_run().state(), proto::RunStatus::STATE_RUNNING);
  EXPECT_EQ(Reformations("node_lost"), 1);
  std::vector<proto::JoinResponse> moved = {back};
  for (int node : {0, 2}) {
    ASSERT_OK_AND_ASSIGN(proto::JoinResponse m,
                         coordinator_->Rejoin(RejoinFor(node, joins_[node])));
    EXPECT_EQ(m.group_epoch(), 2u);
    EXPECT_EQ(m.carried_run_id(), 1u);
    moved.push_back(m);
  }
  EndRunOneInEpoch2(moved);
  status = Status();
  ASSERT_GE(status.recent_runs_size(), 1);
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
  EXPECT_EQ(status.group_epoch(), 2u);
}

// A node that joins while a run that can go on runs (a lost member
// restarted after it was dropped): taken in at once, and the run goes on
// in the new group with its workers counted.
TEST_F(CoordinatorReformTest, ARestartedNodeIsTakenIntoARunThatGoesOn) {
  Create(3);
  Form(3);
  DropNode1AndBeginARun();
  if (HasFatalFailure()) return;
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse back,
                       coordinator_->Join(JoinRequestFor(1), Soon()));
  EXPECT_EQ(back.group_epoch(), 3u);
  EXPECT_EQ(back.rank(), 1);
  EXPECT_EQ(back.group_size(), 3);
  EXPECT_EQ(back.carried_run_id(), 1u);
  EXPECT_EQ(Reformations("node_joined"), 1);
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.current_run().run_id(), 1u);
  EXPECT_EQ(status.current_run().state(), proto::RunStatus::STATE_RUNNING);
  EXPECT_EQ(status.current_run().total_workers(), 3);
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse c,
                       coordinator_->Rejoin(RejoinFor(2, moved_[1])));
  EXPECT_EQ(c.group_epoch(), 3u);
  EXPECT_EQ(c.carried_run_id(), 1u);
}

// The run goes on in the re-formed group: its data schedule continues from
// the iteration the first schedule request names (where the run goes on):
// the epoch's partitions the old group had not read, over the new group's
// workers, then whole epochs; an iteration before that is refused.
TEST_F(CoordinatorReformTest, TheScheduleOfARunThatGoesOnContinuesTheEpoch) {
  Create(3);
  for (auto& join : FormAndBeginRunOne(coordinator_.get(), 3)) {
    joins_.push_back(join);
  }
  ASSERT_EQ(joins_.size(), 3u);
  // 3 workers (one per node), 40 partitions, 1 epoch: 14 iterations.
  proto::GetScheduleRequest request;
  request.set_job_id("job-a");
  request.set_rank(0);
  request.set_group_epoch(1);
  request.set_next_iteration(0);
  ASSERT_OK_AND_ASSIGN(proto::Schedule first,
                       coordinator_->GetSchedule(request));
  ASSERT_EQ(first.epochs(), 1u);
  EXPECT_EQ(first.iterations_per_epoch(), 14u);
  EXPECT_EQ(first.total_iterations(), 14u);
  Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
  ASSERT_EQ(Status().group_epoch(), 2u);
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse moved,
                       coordinator_->Rejoin(RejoinFor(0, joins_[0])));
  ASSERT_EQ(moved.carried_run_id(), 1u);
  // The run goes on at iteration 5: the old plan had handed out
  // partitions 0..14; 15..39 go to the 2 workers left, 13 iterations.
  request.set_group_epoch(2);
  request.set_next_iteration(5);
  ASSERT_OK_AND_ASSIGN(proto::Schedule s, coordinator_->GetSchedule(request));
  EXPECT_EQ(s.total_iterations(), 18u);
  EXPECT_EQ(s.iterations_per_epoch(), 20u);  // of a whole epoch of 2
  ASSERT_EQ(s.iterations_size(), 4);
  for (int j = 0; j < 4; ++j) {
    const proto::ScheduledIteration& it = s.iterations(j);
    EXPECT_EQ(it.iteration(), 5u + j);
    EXPECT_EQ(it.epoch(), 0u);
    ASSERT_EQ(it.assignments_size(), 1) << "iteration " << it.iteration();
    EXPECT_EQ(it.assignments(0).partitions(0), 15u + 2 * j);
    EXPECT_FALSE(it.last_in_epoch());
  }
  // The other survivor (rank 1 now) reads the partitions in between.
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse moved2,
                       coordinator_->Rejoin(RejoinFor(2, joins_[2])));
  request.set_rank(moved2.rank());
  ASSERT_OK_AND_ASSIGN(proto::Schedule other,
                       coordinator_->GetSchedule(request));
  ASSERT_EQ(other.iterations_size(), 4);
  EXPECT_EQ(other.iterations(0).assignments(0).partitions(0), 16u);
  // The end: partitions 37 and 39 for rank 0, the epoch's last iteration.
  request.set_rank(0);
  request.set_next_iteration(16);
  ASSERT_OK_AND_ASSIGN(proto::Schedule end, coordinator_->GetSchedule(request));
  EXPECT_TRUE(end.done());
  ASSERT_EQ(end.iterations_size(), 2);
  EXPECT_EQ(end.iterations(0).assignments(0).partitions(0), 37u);
  EXPECT_EQ(end.iterations(1).assignments(0).partitions(0), 39u);
  EXPECT_TRUE(end.iterations(1).last_in_epoch());
  // An iteration the old group's plan covered is not planned again.
  request.set_next_iteration(4);
  EXPECT_THAT(coordinator_->GetSchedule(request),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("this group's plan begins at iteration 5")));
}

TEST_F(CoordinatorReformTest, ABeginRunWaitingWhenTheGroupReFormsIsRefused) {
  Create(3);
  Form(3);
  // Ranks 0 and 2 wait to begin; rank 1 falls silent and is dropped.
  std::vector<proto::BeginRunRequest> begins = {BeginFor(0), BeginFor(2)};
  std::vector<absl::StatusOr<proto::BeginRunResponse>> answers;
  std::thread waiting(
      [&] { answers = BeginAll(coordinator_.get(), begins, Soon()); });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.current_run().state() == proto::RunStatus::STATE_DECLARING;
  }));
  Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
  waiting.join();
  ASSERT_EQ(answers.size(), 2u);
  for (const auto& answer : answers) {
    // Refused while waiting (a rank LOST, then the group re-formed), or,
    // for a call that came after, sent to re-register for the new epoch.
    EXPECT_THAT(answer, AnyOf(StatusIs(absl::StatusCode::kUnavailable,
                                       AnyOf(HasSubstr("LOST"),
                                             HasSubstr("the group re-formed"))),
                              StatusIs(absl::StatusCode::kNotFound,
                                       HasSubstr("runs group epoch 2"))));
  }
  EXPECT_EQ(Status().group_epoch(), 2u);
}

TEST_F(CoordinatorReformTest, BelowMinNodesTheGroupWaitsDegraded) {
  Create(3, absl::ZeroDuration(), /*min_nodes=*/3);
  Form(3);
  Beat({{0, joins_[0]}, {2, joins_[2]}}, 6);
  proto::JobStatus status = Status();
  EXPECT_EQ(status.group_epoch(), 1u);
  EXPECT_TRUE(status.degraded());
  // Its node restarted: the group re-forms whole.
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse back,
                       coordinator_->Join(JoinRequestFor(1), Soon()));
  EXPECT_EQ(back.group_epoch(), 2u);
  EXPECT_EQ(back.group_size(), 3);
  // A fourth node does not fit.
  EXPECT_THAT(coordinator_->Join(JoinRequestFor(3), Soon()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("has its full group of 3 nodes")));
}

TEST_F(CoordinatorReformTest, ALateJoinSaysWhatItWaitsFor) {
  Create(3, absl::ZeroDuration(), 1, absl::ZeroDuration(), /*replicas=*/0);
  Form(3);
  DropNode1AndBeginARun();
  if (HasFatalFailure()) return;
  EXPECT_THAT(
      coordinator_->Join(JoinRequestFor(1),
                         absl::Now() + absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               AllOf(HasSubstr("did not take the node in within"),
                     HasSubstr("takes new nodes between runs and run 1 is "
                               "running"))));
  // It left the queue: the group is unchanged.
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.nodes_size(), 2);
  EXPECT_EQ(status.group_epoch(), 2u);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
