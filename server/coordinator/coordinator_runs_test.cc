// Runs on the Coordinator: BeginRun rounds, EndRun, failures told by
// heartbeat, and what status shows of them.
#include <atomic>
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
#include "server/metrics/text_format.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr auto kRunning = proto::RunStatus::STATE_RUNNING;
constexpr auto kFinished = proto::RunStatus::STATE_FINISHED;
constexpr auto kFailed = proto::RunStatus::STATE_FAILED;

class CoordinatorRunsTest : public ::testing::Test {
 protected:
  void Form(int nodes, uint64_t parameter_count = 0, int replicas = 1) {
    CoordinatorOptions options = TestOptions(nodes);
    options.parameter_count = parameter_count;
    options.replicas = replicas;
    ASSERT_OK_AND_ASSIGN(coordinator_,
                         Coordinator::Create(options, &clock_, &registry_));
    for (const auto& r : JoinAll(coordinator_.get(), nodes)) {
      ASSERT_OK(r.status());
    }
    nodes_ = nodes;
  }

  std::vector<proto::BeginRunRequest> Everyone() const {
    std::vector<proto::BeginRunRequest> requests;
    for (int rank = 0; rank < nodes_; ++rank) {
      requests.push_back(BeginFor(rank));
    }
    return requests;
  }

  // Begins a run on every rank; its id.
  uint64_t BeginRun() {
    uint64_t id = 0;
    for (const auto& answer : BeginAll(coordinator_.get(), Everyone())) {
      EXPECT_OK(answer.status());
      if (answer.ok()) id = answer->run_id();
    }
    return id;
  }

  proto::JobStatus Status() {
    absl::StatusOr<proto::JobStatus> status = coordinator_->GetJobStatus({});
    EXPECT_OK(status.status());
    return status.ok() ? *status : proto::JobStatus();
  }

  proto::HeartbeatRequest BeatInRun(int rank, uint64_t run_id,
                                    proto::RunStatus::State state) {
    proto::HeartbeatRequest beat = Beat(rank);
    beat.mutable_run()->set_run_id(run_id);
    beat.mutable_run()->set_state(state);
    return beat;
  }

  FakeClock clock_;
  metrics::MetricsRegistry registry_;
  std::unique_ptr<Coordinator> coordinator_;
  int nodes_ = 0;
};

TEST_F(CoordinatorRunsTest, EveryRankGetsTheSameRunWhenTheLastOneAsks) {
  Form(4);
  const auto answers = BeginAll(coordinator_.get(), Everyone());
  for (const auto& answer : answers) {
    ASSERT_OK(answer.status());
    EXPECT_EQ(answer->run_id(), 1u);
    EXPECT_EQ(answer->first_op_seq(), 14u);  // max(10..13) + 1
    EXPECT_EQ(answer->total_workers(), 8);
    EXPECT_EQ(answer->parameter_count(), 1010u);
    ASSERT_EQ(answer->tensors_size(), 2);
    EXPECT_EQ(answer->tensors(1).name(), "b");
    EXPECT_EQ(answer->SerializeAsString(), answers[0]->SerializeAsString());
  }
  proto::JobStatus status = Status();
  EXPECT_EQ(status.current_run().run_id(), 1u);
  EXPECT_EQ(status.current_run().state(), kRunning);
  EXPECT_EQ(status.current_run().total_workers(), 8);
  EXPECT_EQ(status.current_run().parameter_count(), 1010u);

  // The next round is run 2; run 1 ended on every rank that began run 2.
  EXPECT_EQ(BeginRun(), 2u);
  status = Status();
  EXPECT_EQ(status.current_run().run_id(), 2u);
  ASSERT_THAT(status.recent_runs(), SizeIs(1));
  EXPECT_EQ(status.recent_runs(0).run_id(), 1u);
  EXPECT_EQ(status.recent_runs(0).state(), kFinished);
}

TEST_F(CoordinatorRunsTest, DifferentTablesFailEveryRankNamingTensorAndRanks) {
  Form(3);
  std::vector<proto::BeginRunRequest> requests = Everyone();
  requests[1].mutable_tensors(0)->set_shape(0, 999);
  for (const auto& answer : BeginAll(coordinator_.get(), requests)) {
    EXPECT_THAT(answer, StatusIs(absl::StatusCode::kInvalidArgument,
                                 "tensor 'w' declared as [1000] float32 by "
                                 "rank 0 but as [999] float32 by rank 1"));
  }
  const proto::JobStatus status = Status();
  EXPECT_THAT(status.last_error(), HasSubstr("no run could begin: tensor 'w'"));
  EXPECT_FALSE(status.has_current_run());
  // Nothing was used up: the next good round is run 1.
  EXPECT_EQ(BeginRun(), 1u);
}

TEST_F(CoordinatorRunsTest, ARanksOwnDisagreementReachesEveryRank) {
  Form(2);
  std::vector<proto::BeginRunRequest> requests = Everyone();
  requests[0].clear_tensors();
  requests[0].set_error(
      "tensor 'w' declared as [4] float32 by worker 0 of rank 0 but as [5] "
      "float32 by worker 1 of rank 0");
  for (const auto& answer : BeginAll(coordinator_.get(), requests)) {
    EXPECT_THAT(answer, StatusIs(absl::StatusCode::kInvalidArgument,
                                 requests[0].error()));
  }
}

TEST_F(CoordinatorRunsTest, ParameterCountFlagIsEnforcedWhenSet) {
  Form(2, /*parameter_count=*/1000);
  for (const auto& answer : BeginAll(coordinator_.get(), Everyone())) {
    EXPECT_THAT(answer,
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("hold 1010 elements but the job's "
                                   "parameter count is 1000 "
                                   "(starling-coordinator --parameter_count")));
  }
}

TEST_F(CoordinatorRunsTest, TimeoutNamesTheRanksThatHaveNotBegunCountedThen) {
  Form(4);
  std::atomic<bool> cancel{false};
  absl::StatusOr<proto::BeginRunResponse> first = absl::UnknownError("");
  std::thread rank0([&] {
    first = coordinator_->BeginRun(BeginFor(0), absl::Now() + absl::Seconds(20),
                                   [&] { return cancel.load(); });
  });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.current_run().state() == proto::RunStatus::STATE_DECLARING;
  }));
  // Rank 1 gives up first; rank 0, which came earlier, is counted.
  EXPECT_THAT(
      coordinator_->BeginRun(BeginFor(1),
                             absl::Now() + absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("ranks 2, 3 have not ended their declarations (2 of "
                         "4 ranks waiting)")));
  cancel = true;
  rank0.join();
  EXPECT_THAT(first, StatusIs(absl::StatusCode::kCancelled,
                              HasSubstr("ranks 1, 2, 3 have not ended")));
  EXPECT_FALSE(Status().has_current_run());
}

TEST_F(CoordinatorRunsTest, ANewerBeginRunFromTheSameRankReplacesTheOlder) {
  Form(2);
  absl::StatusOr<proto::BeginRunResponse> older = absl::UnknownError("");
  std::thread first([&] {
    older =
        coordinator_->BeginRun(BeginFor(0), absl::Now() + absl::Seconds(20));
  });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.current_run().state() == proto::RunStatus::STATE_DECLARING;
  }));
  absl::StatusOr<proto::BeginRunResponse> newer = absl::UnknownError("");
  std::thread second([&] {
    newer =
        coordinator_->BeginRun(BeginFor(0), absl::Now() + absl::Seconds(20));
  });
  first.join();  // answered as soon as the newer call is in
  EXPECT_THAT(older, StatusIs(absl::StatusCode::kAborted,
                              HasSubstr("replaced by a newer one")));
  ASSERT_OK_AND_ASSIGN(
      proto::BeginRunResponse other,
      coordinator_->BeginRun(BeginFor(1), absl::Now() + absl::Seconds(20)));
  second.join();
  ASSERT_OK(newer.status());
  EXPECT_EQ(newer->run_id(), 1u);
  EXPECT_EQ(other.run_id(), 1u);
}

TEST_F(CoordinatorRunsTest, LostRanksFailBeginRunAtOnceNamingThem) {
  Form(3);
  absl::StatusOr<proto::BeginRunResponse> waiting = absl::UnknownError("");
  std::thread rank0([&] {
    waiting =
        coordinator_->BeginRun(BeginFor(0), absl::Now() + absl::Seconds(20));
  });
  ASSERT_TRUE(WaitForStatus(coordinator_.get(), [](const proto::JobStatus& s) {
    return s.current_run().state() == proto::RunStatus::STATE_DECLARING;
  }));
  // Ranks 0 and 1 heartbeat; rank 2 falls silent and is lost.
  for (int second = 0; second < 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(coordinator_->Heartbeat(Beat(0)).status());
    ASSERT_OK(coordinator_->Heartbeat(Beat(1)).status());
  }
  rank0.join();  // woken by the loss, long before its deadline
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("no run can begin: rank 2 is LOST "
                                          "(rank 2 (node-2, 10.0.0.2:29500)")));
  EXPECT_THAT(
      coordinator_->BeginRun(BeginFor(1), absl::Now() + absl::Seconds(20)),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 2 is LOST")));
}

TEST_F(CoordinatorRunsTest, ARunFinishesWhenEveryRankReportedItFinished) {
  Form(2);
  const uint64_t run = BeginRun();
  ASSERT_OK(coordinator_->EndRun(EndFor(0, run, kFinished, 50)));
  EXPECT_EQ(Status().current_run().run_id(), run);
  clock_.Advance(absl::Seconds(4));
  ASSERT_OK(coordinator_->EndRun(EndFor(1, run, kFinished, 50)));
  const proto::JobStatus status = Status();
  EXPECT_FALSE(status.has_current_run());
  ASSERT_THAT(status.recent_runs(), SizeIs(1));
  EXPECT_EQ(status.recent_runs(0).state(), kFinished);
  EXPECT_EQ(status.recent_runs(0).steps(), 50);
  EXPECT_DOUBLE_EQ(status.recent_runs(0).ended_unix_seconds() -
                       status.recent_runs(0).started_unix_seconds(),
                   4.0);
  EXPECT_THAT(coordinator_->EndRun(EndFor(0, 0, kFinished, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      coordinator_->EndRun(EndFor(0, run, kRunning, 1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("STATE_RUNNING")));
}

TEST_F(CoordinatorRunsTest, AFailureIsToldToTheOtherRanksAndStaysTheLastError) {
  Form(3);
  const uint64_t run = BeginRun();
  ASSERT_OK(coordinator_->EndRun(
      EndFor(1, run, kFailed, 7, "nan gradient in tensor 'w'", 7)));
  const std::string error =
      "rank 1 (node-1, 10.0.0.1:29500) step 7: nan gradient in tensor 'w'";
  // Ranks still running run 1 hear of it in their next heartbeat answer,
  // until they report it ended.
  for (int round = 0; round < 2; ++round) {
    ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse r,
                         coordinator_->Heartbeat(BeatInRun(0, run, kRunning)));
    ASSERT_THAT(r.failed_runs(), SizeIs(1));
    EXPECT_EQ(r.failed_runs(0).run_id(), run);
    EXPECT_EQ(r.failed_runs(0).rank(), 1);
    EXPECT_EQ(r.failed_runs(0).step(), 7);
    EXPECT_EQ(r.failed_runs(0).error(), error);
  }
  ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse reporter,
                       coordinator_->Heartbeat(BeatInRun(1, run, kFailed)));
  EXPECT_THAT(reporter.failed_runs(), IsEmpty());
  // Rank 2 aborts and reports the echo; the first error stays.
  ASSERT_OK(coordinator_->EndRun(
      EndFor(2, run, kFailed, 7, "run aborted: rank 1 failed", 7)));
  proto::StepReport echo;
  echo.set_job_id("job-a");
  echo.set_rank(0);
  echo.set_iteration(7);
  echo.set_error("reduce-scatter aborted");
  ASSERT_OK(coordinator_->ReportStep(echo));
  ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse r2,
                       coordinator_->Heartbeat(BeatInRun(2, run, kFailed)));
  EXPECT_THAT(r2.failed_runs(), IsEmpty());

  const proto::JobStatus status = Status();
  EXPECT_EQ(status.last_error(), error);
  ASSERT_THAT(status.recent_runs(), SizeIs(1));
  EXPECT_EQ(status.recent_runs(0).state(), kFailed);
  EXPECT_EQ(status.recent_runs(0).error(), error);
  EXPECT_EQ(status.nodes(1).last_error(), "nan gradient in tensor 'w'");
  EXPECT_EQ(status.nodes(2).last_error(), "run aborted: rank 1 failed");
}

TEST_F(CoordinatorRunsTest, AFailedRunInAHeartbeatShowsInStatusAtOnce) {
  Form(2);
  const uint64_t run = BeginRun();
  proto::HeartbeatRequest beat = BeatInRun(1, run, kFailed);
  beat.mutable_run()->set_steps(12);
  beat.mutable_run()->set_error("worker 1 missing past its grace (30s)");
  proto::WorkerStatus* worker = beat.add_workers();
  worker->set_index(1);
  worker->set_name("trainer-1");
  worker->set_state(proto::WorkerStatus::STATE_MISSING);
  worker->set_grace_left_seconds(0);
  ASSERT_OK(coordinator_->Heartbeat(beat).status());
  const proto::JobStatus status = Status();
  EXPECT_THAT(status.last_error(),
              HasSubstr("rank 1 (node-1, 10.0.0.1:29500): worker 1 missing "
                        "past its grace"));
  ASSERT_THAT(status.recent_runs(), SizeIs(1));
  EXPECT_EQ(status.recent_runs(0).state(), kFailed);
  EXPECT_EQ(status.recent_runs(0).steps(), 12);
  EXPECT_EQ(status.nodes(1).run().state(), kFailed);
  ASSERT_THAT(status.nodes(1).workers(), SizeIs(1));
  EXPECT_EQ(status.nodes(1).workers(0).name(), "trainer-1");
  EXPECT_EQ(status.nodes(1).last_error(),
            "worker 1 missing past its grace (30s)");
  // Rank 0 is told.
  ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse r,
                       coordinator_->Heartbeat(BeatInRun(0, run, kRunning)));
  EXPECT_THAT(r.failed_runs(), SizeIs(1));
  // And the metrics say it as soon as status does.
  const std::string text = metrics::EncodeTextFormat(registry_.Collect());
  EXPECT_THAT(text, HasSubstr("starling_coordinator_workers{rank=\"1\","
                              "state=\"missing\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_workers{rank=\"1\","
                              "state=\"attached\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_runs_started_total 1\n"));
  EXPECT_THAT(text, HasSubstr("starling_coordinator_runs_ended_total{"
                              "state=\"failed\"} 1\n"));
}

// Without replicas (with them the run waits for the re-formed group that
// carries it on: ALostRankWithReplicasLeavesTheRunToGoOn).
TEST_F(CoordinatorRunsTest, ALostRankFailsTheCurrentRun) {
  Form(3, 0, /*replicas=*/0);
  const uint64_t run = BeginRun();
  for (int second = 0; second < 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(coordinator_->Heartbeat(BeatInRun(1, run, kRunning)).status());
    ASSERT_OK(coordinator_->Heartbeat(BeatInRun(2, run, kRunning)).status());
  }
  ASSERT_OK_AND_ASSIGN(proto::HeartbeatResponse r,
                       coordinator_->Heartbeat(BeatInRun(1, run, kRunning)));
  EXPECT_TRUE(r.degraded());
  EXPECT_THAT(r.lost_ranks(), testing::ElementsAre(0));
  ASSERT_THAT(r.failed_runs(), SizeIs(1));
  EXPECT_EQ(r.failed_runs(0).rank(), 0);
  EXPECT_THAT(r.failed_runs(0).error(),
              HasSubstr("rank 0 (node-0, 10.0.0.0:29500) lost: no heartbeat"));
  const proto::JobStatus status = Status();
  EXPECT_TRUE(status.degraded());
  EXPECT_EQ(status.healthy_nodes(), 2);
  EXPECT_EQ(status.recent_runs(0).state(), kFailed);
}

TEST_F(CoordinatorRunsTest, ALostRankWithReplicasLeavesTheRunToGoOn) {
  Form(3);
  const uint64_t run = BeginRun();
  for (int second = 0; second < 6; ++second) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_OK(coordinator_->Heartbeat(BeatInRun(1, run, kRunning)).status());
    ASSERT_OK(coordinator_->Heartbeat(BeatInRun(2, run, kRunning)).status());
  }
  // Rank 0 lost (kept for its --rejoin_grace here): the run is not failed
  // but waits for the group to re-form without it, which carries it on.
  absl::StatusOr<proto::HeartbeatResponse> r =
      coordinator_->Heartbeat(BeatInRun(1, run, kRunning));
  if (r.ok()) {
    EXPECT_THAT(r->failed_runs(), SizeIs(0));
  }
  const proto::JobStatus status = Status();
  ASSERT_NE(status.current_run().run_id(), 0u);
  EXPECT_EQ(status.current_run().run_id(), run);
  EXPECT_EQ(status.current_run().state(), proto::RunStatus::STATE_RUNNING);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
