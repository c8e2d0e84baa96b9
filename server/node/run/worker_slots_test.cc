#include "server/node/run/worker_slots.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/base/status_matchers.h"
#include "server/node/run/run.h"

namespace starling {
namespace node {
namespace {

constexpr absl::Duration kGrace = absl::Seconds(60);
const absl::Time kT0 = absl::FromUnixSeconds(1000);

WorkerHandle Worker(int index, uint64_t session, pid_t pid = 0) {
  WorkerHandle worker;
  worker.session = session;
  worker.index = index;
  worker.name = "w" + std::to_string(index);
  worker.pid = pid;
  return worker;
}

proto::WorkerRequest Push(int64_t step) {
  proto::WorkerRequest request;
  request.mutable_push_gradients()->set_step(step);
  return request;
}

// Two slots in run 7, worker 1 at step 3 when it leaves at kT0.
class WorkerSlotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    run_.id = 7;
    proto::HelloReply reply;
    ASSERT_OK(slots_.Attach(Worker(0, 1), &run_, kT0, &reply).status());
    ASSERT_OK(slots_.Attach(Worker(1, 2), &run_, kT0, &reply).status());
    slots_.BeginRun(run_.id);
    for (int64_t step = 0; step < 3; ++step) {
      slots_.Enqueue(Round{Worker(0, 1), Push(step), kT0});
      slots_.Enqueue(Round{Worker(1, 2), Push(step), kT0});
      ASSERT_TRUE(slots_.RoundReady());
      ASSERT_EQ(slots_.TakeRound(1).size(), 2u);
    }
    ASSERT_EQ(slots_.Detach(Worker(1, 2), &run_, kT0),
              WorkerSlots::Detached::kMissing);
  }

  node::Run run_;
  WorkerSlots slots_{2, kGrace, "rank 0 (test)"};
};

TEST_F(WorkerSlotsTest, MissingWorkerHoldsTheRunUntilTheGraceEnds) {
  absl::StatusOr<absl::Time> wake = slots_.CheckGrace(kT0 + kGrace / 2);
  ASSERT_OK(wake.status());
  EXPECT_EQ(*wake, kT0 + kGrace);

  const absl::Status expired = slots_.CheckGrace(kT0 + kGrace).status();
  EXPECT_THAT(expired, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(expired.message(),
            "local worker 'w1' (index 1) of rank 0 (test) left run 7 at step "
            "3 and no worker took its place within the grace of 1m");
}

TEST_F(WorkerSlotsTest, StatusCountsDownTheGrace) {
  const std::vector<proto::WorkerStatus> status =
      slots_.Status(kT0 + absl::Seconds(15));
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[1].state(), proto::WorkerStatus::STATE_MISSING);
  EXPECT_EQ(status[1].next_step(), 3);
  EXPECT_DOUBLE_EQ(status[1].missing_seconds(), 15.0);
  EXPECT_DOUBLE_EQ(status[1].grace_left_seconds(), 45.0);
  EXPECT_DOUBLE_EQ(slots_.Status(kT0 + 2 * kGrace)[1].grace_left_seconds(),
                   0.0);
  EXPECT_EQ(slots_.connected(), 1);
}

TEST_F(WorkerSlotsTest, ReplacementResumesAtTheStepReached) {
  proto::HelloReply reply;
  absl::StatusOr<WorkerSlots::Attached> attached =
      slots_.Attach(Worker(1, 3), &run_, kT0 + absl::Seconds(5), &reply);
  ASSERT_OK(attached.status());
  EXPECT_EQ(*attached, WorkerSlots::Attached::kResumed);
  EXPECT_EQ(reply.run_id(), 7u);
  EXPECT_EQ(reply.next_step(), 3);
  EXPECT_EQ(reply.grace_ms(), 60000);
  EXPECT_EQ(*slots_.CheckGrace(kT0 + 2 * kGrace), absl::InfiniteFuture());
  // The worker it replaced is no longer this slot's.
  EXPECT_EQ(slots_.Find(Worker(1, 2)), nullptr);
  EXPECT_NE(slots_.Find(Worker(1, 3)), nullptr);
}

TEST_F(WorkerSlotsTest, TakenIndexIsRefused) {
  proto::HelloReply reply;
  EXPECT_THAT(slots_.Attach(Worker(0, 9), &run_, kT0, &reply).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

// Client::Rejoin closes its connection and opens another at once: the
// daemon may see the new hello before the close. The same process (pid)
// takes its own slot back, at the step its slot had reached; another
// process is still refused.
TEST(WorkerSlots, TheSameProcessConnectingAgainTakesItsSlotBack) {
  WorkerSlots slots(1, kGrace, "rank 0 (test)");
  node::Run run;
  run.id = 7;
  proto::HelloReply reply;
  ASSERT_OK(slots.Attach(Worker(0, 1, 42), nullptr, kT0, &reply).status());
  slots.BeginRun(run.id);
  slots.Enqueue(Round{Worker(0, 1, 42), Push(0), kT0});
  ASSERT_EQ(slots.TakeRound(1).size(), 1u);

  const absl::Status other =
      slots.Attach(Worker(0, 2, 43), &run, kT0, &reply).status();
  EXPECT_THAT(other, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(other.message(),
            "worker index 0 on rank 0 (test) is taken by 'w0' (pid 42)");

  absl::StatusOr<WorkerSlots::Attached> again =
      slots.Attach(Worker(0, 3, 42), &run, kT0, &reply);
  ASSERT_OK(again.status());
  EXPECT_EQ(*again, WorkerSlots::Attached::kResumed);
  EXPECT_EQ(reply.run_id(), 7u);
  EXPECT_EQ(reply.next_step(), 1);
  EXPECT_EQ(slots.Find(Worker(0, 1, 42)), nullptr);
  // The earlier connection's close, read late, changes nothing.
  EXPECT_EQ(slots.Detach(Worker(0, 1, 42), &run, kT0),
            WorkerSlots::Detached::kReplaced);
  EXPECT_NE(slots.Find(Worker(0, 3, 42)), nullptr);
}

TEST_F(WorkerSlotsTest, FailedRunAnswersQueuedRoundsAndEmptiesLeftSlots) {
  slots_.Enqueue(Round{Worker(0, 1), Push(3), kT0});
  WorkerSlots::Replies replies;
  slots_.RunFailed(absl::AbortedError("run 7 failed"), &replies);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_THAT(replies[0].second, StatusIs(absl::StatusCode::kAborted));
  const std::vector<proto::WorkerStatus> status = slots_.Status(kT0);
  ASSERT_EQ(status.size(), 1u);  // the missing slot emptied
  EXPECT_EQ(status[0].index(), 0);
  EXPECT_EQ(status[0].state(), proto::WorkerStatus::STATE_ATTACHED);
}

TEST(WorkerSlots, WorkerLeavingBeforeItsRunChangesNothing) {
  WorkerSlots slots(1, kGrace, "rank 0 (test)");
  proto::HelloReply reply;
  ASSERT_OK(slots.Attach(Worker(0, 1), nullptr, kT0, &reply).status());
  EXPECT_EQ(slots.Detach(Worker(0, 1), nullptr, kT0),
            WorkerSlots::Detached::kGone);
  EXPECT_TRUE(slots.Status(kT0).empty());
  EXPECT_EQ(*slots.CheckGrace(kT0 + 2 * kGrace), absl::InfiniteFuture());
}

}  // namespace
}  // namespace node
}  // namespace starling
