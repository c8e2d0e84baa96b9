// A restarted Coordinator learns the running group from its nodes' Rejoin
// calls; a member it knows is confirmed, a LOST one revived.
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
using ::testing::HasSubstr;
using ::testing::SizeIs;

class CoordinatorRejoinTest : public ::testing::Test {
 protected:
  // The first coordinator forms a group of `nodes` and runs run 1; then
  // "restarts": a fresh coordinator (fresh registry) replaces it.
  void FormThenRestart(int nodes) {
    ASSERT_OK_AND_ASSIGN(
        auto first,
        Coordinator::Create(TestOptions(nodes), &clock_, &first_registry_));
    joins_ = FormAndBeginRunOne(first.get(), nodes);
    ASSERT_EQ(joins_.size(), static_cast<size_t>(nodes));
    first.reset();
    ASSERT_OK_AND_ASSIGN(
        coordinator_,
        Coordinator::Create(TestOptions(nodes), &clock_, &registry_));
  }

  // What rank `rank` sends to re-register: its Join identity and its group,
  // running run 1 at step 30.
  proto::RejoinRequest RejoinFor(int rank) {
    const proto::JoinResponse& join = joins_[rank];
    proto::RejoinRequest request;
    *request.mutable_node() = JoinRequestFor(rank);
    request.set_rank(join.rank());
    request.set_group_epoch(join.group_epoch());
    *request.mutable_peers() = join.peers();
    *request.mutable_shard_map() = join.shard_map();
    request.mutable_run()->set_run_id(1);
    request.mutable_run()->set_state(proto::RunStatus::STATE_RUNNING);
    request.mutable_run()->set_steps(30);
    request.mutable_run()->set_total_workers(6);
    request.set_highest_run_id(1);
    return request;
  }

  proto::JobStatus Status() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_OK(status.status());
    return status.ok() ? *status : proto::JobStatus();
  }

  FakeClock clock_;
  metrics::MetricsRegistry first_registry_;
  metrics::MetricsRegistry registry_;
  std::vector<proto::JoinResponse> joins_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorRejoinTest, ARestartedCoordinatorAdoptsTheRunningGroup) {
  FormThenRestart(3);
  // The fresh coordinator knows no group: the node must re-register.
  EXPECT_THAT(coordinator_->Heartbeat(Beat(1)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("re-registers (Rejoin)")));
  EXPECT_EQ(Status().nodes_size(), 0);

  ASSERT_OK_AND_ASSIGN(proto::JoinResponse answer,
                       coordinator_->Rejoin(RejoinFor(1)));
  EXPECT_EQ(answer.rank(), 1);
  EXPECT_EQ(answer.group_epoch(), 1u);
  EXPECT_EQ(answer.peers_size(), 3);
  EXPECT_EQ(answer.shard_map().size(), joins_[1].shard_map().size());

  proto::JobStatus status = Status();
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.group_size(), 3);
  EXPECT_EQ(status.healthy_nodes(), 1);
  EXPECT_FALSE(status.degraded());
  EXPECT_EQ(status.nodes(0).peer().health(), proto::NODE_HEALTH_JOINING);
  EXPECT_EQ(status.nodes(1).peer().health(), proto::NODE_HEALTH_HEALTHY);
  EXPECT_EQ(status.nodes(2).peer().hostname(), "node-2");
  EXPECT_EQ(status.current_run().run_id(), 1u);
  EXPECT_EQ(status.current_run().steps(), 30);
  // Members not yet re-registered are sent to do so.
  EXPECT_THAT(coordinator_->Heartbeat(Beat(0)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("has not re-registered since the coordinator "
                                 "restarted")));
  ASSERT_OK(coordinator_->Heartbeat(Beat(1)).status());

  ASSERT_OK(coordinator_->Rejoin(RejoinFor(0)).status());
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(2)).status());
  status = Status();
  EXPECT_EQ(status.healthy_nodes(), 3);
  EXPECT_EQ(status.nodes(0).local_workers(), 1);
  // Training goes on: heartbeats are taken, and the next run continues the
  // numbering above the adopted run.
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_OK(coordinator_->Heartbeat(Beat(rank)).status());
  }
  std::vector<proto::BeginRunRequest> requests;
  for (int rank = 0; rank < 3; ++rank) requests.push_back(BeginFor(rank));
  for (const auto& next : BeginAll(coordinator_.get(), requests)) {
    ASSERT_OK(next.status());
    EXPECT_EQ(next->run_id(), 2u);
  }
  status = Status();
  ASSERT_THAT(status.recent_runs(), SizeIs(1));
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
}

// A live member's entry is not rewritten: a re-registration in its name
// with another admin address (where `starlingctl inflight` would then ask)
// is refused while the member heartbeats; the member re-registering as it
// is, is taken; once it fell silent, a re-registration may change it.
TEST_F(CoordinatorRejoinTest, ALiveMembersEntryIsNotRewritten) {
  FormThenRestart(3);
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_OK(coordinator_->Rejoin(RejoinFor(rank)).status());
  }
  ASSERT_OK(coordinator_->Heartbeat(coordinator::Beat(1, 1)).status());
  proto::RejoinRequest elsewhere = RejoinFor(1);
  elsewhere.mutable_node()->set_admin_address("10.6.6.6:29601");
  EXPECT_THAT(coordinator_->Rejoin(elsewhere),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("admin address '10.6.6.6:29601' "
                                       "refused: that member is alive"),
                             HasSubstr("registered with admin address "
                                       "'10.0.0.1:29501'"))));
  EXPECT_EQ(Status().nodes(1).peer().admin_address(), "10.0.0.1:29501");
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(1)).status());
  clock_.Advance(2 * HeartbeatInterval(coordinator_->options()));
  ASSERT_OK(coordinator_->Rejoin(elsewhere).status());
  EXPECT_EQ(Status().nodes(1).peer().admin_address(), "10.6.6.6:29601");
}

TEST_F(CoordinatorRejoinTest, AnotherGroupIsRefusedNamingBoth) {
  FormThenRestart(2);
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(0)).status());
  proto::RejoinRequest other = RejoinFor(1);
  other.set_group_epoch(2);
  EXPECT_THAT(coordinator_->Rejoin(other),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "rank 1 (node-1) reports group epoch 2 of 2 nodes "
                       "[10.0.0.0:29500, 10.0.0.1:29500], but this coordinator "
                       "runs group epoch 1 of 2 nodes [10.0.0.0:29500, "
                       "10.0.0.1:29500]"));
  proto::RejoinRequest bad = RejoinFor(1);
  bad.set_rank(0);  // claims another node's rank
  EXPECT_THAT(coordinator_->Rejoin(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("its own data address")));
  proto::RejoinRequest old_version = RejoinFor(1);
  old_version.mutable_node()->set_version("0.0.1");
  EXPECT_THAT(coordinator_->Rejoin(old_version),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("runs starling 0.0.1")));
}

TEST_F(CoordinatorRejoinTest, AGroupOfAnotherSizeThanExpectedIsNotAdopted) {
  FormThenRestart(2);
  metrics::MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(coordinator_,
                       Coordinator::Create(TestOptions(3), &clock_, &registry));
  EXPECT_THAT(
      coordinator_->Rejoin(RejoinFor(0)),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "rank 0 (node-0) reports a running group of 2 nodes, but this "
               "coordinator forms groups of 3 (--expected_nodes)"));
  coordinator_.reset();  // before `registry`
}

TEST_F(CoordinatorRejoinTest, MembersThatDoNotReRegisterAreLost) {
  FormThenRestart(3);
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(0)).status());
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(1)).status());
  for (int second = 0; second < 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(coordinator_->Heartbeat(Beat(0)).status());
    ASSERT_OK(coordinator_->Heartbeat(Beat(1)).status());
  }
  const proto::JobStatus status = Status();
  EXPECT_EQ(status.nodes(2).peer().health(), proto::NODE_HEALTH_LOST);
  EXPECT_TRUE(status.degraded());
  EXPECT_EQ(status.healthy_nodes(), 2);
  EXPECT_THAT(status.last_error(),
              HasSubstr("rank 2 (node-2, 10.0.0.2:29500) lost: did not "
                        "re-register for 6s"));
  // It can still come back.
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(2)).status());
  EXPECT_EQ(Status().healthy_nodes(), 3);
  EXPECT_FALSE(Status().degraded());
}

TEST_F(CoordinatorRejoinTest, JoinsWaitingForAFreshGroupAreRefusedOnAdoption) {
  FormThenRestart(2);
  absl::StatusOr<proto::JoinResponse> waiting = absl::UnknownError("");
  std::thread newcomer([&] {
    waiting =
        coordinator_->Join(JoinRequestFor(7), absl::Now() + absl::Seconds(20));
  });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.nodes_size() == 1;
  }));
  ASSERT_OK(coordinator_->Rejoin(RejoinFor(0)).status());
  newcomer.join();
  EXPECT_THAT(waiting,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cannot join: the coordinator adopted the "
                                 "running group of 2 nodes (group epoch 1)")));
}

TEST_F(CoordinatorRejoinTest, AKnownMemberIsConfirmedAndALostOneRevived) {
  ASSERT_OK_AND_ASSIGN(
      coordinator_, Coordinator::Create(TestOptions(2), &clock_, &registry_));
  for (auto& r : JoinAll(coordinator_.get(), 2)) {
    ASSERT_OK(r.status());
    joins_.push_back(*r);
  }
  clock_.Advance(absl::Seconds(6));
  ASSERT_OK(coordinator_->Heartbeat(Beat(0)).status());
  EXPECT_EQ(Status().nodes(1).peer().health(), proto::NODE_HEALTH_LOST);
  proto::RejoinRequest request = RejoinFor(1);
  request.clear_run();
  ASSERT_OK_AND_ASSIGN(proto::JoinResponse answer,
                       coordinator_->Rejoin(request));
  EXPECT_EQ(answer.SerializeAsString(), joins_[1].SerializeAsString());
  EXPECT_EQ(Status().healthy_nodes(), 2);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
