#include "server/coordinator/run_book.h"

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const absl::Time kT0 = absl::FromUnixSeconds(1767225600);

proto::TensorSpec Spec(const std::string& name, int64_t elements) {
  proto::TensorSpec spec;
  spec.set_name(name);
  spec.add_shape(elements);
  spec.set_dtype(proto::DATA_TYPE_FLOAT32);
  return spec;
}

// `n` ranks with the same table (w: 1000, b: 10), 2 workers each, and
// next op sequence numbers 5, 6, 7, ...
std::vector<proto::BeginRunRequest> Round(int n) {
  std::vector<proto::BeginRunRequest> requests(n);
  for (int rank = 0; rank < n; ++rank) {
    requests[rank].set_rank(rank);
    requests[rank].set_local_workers(2);
    requests[rank].set_next_op_seq(5 + rank);
    *requests[rank].add_tensors() = Spec("w", 1000);
    *requests[rank].add_tensors() = Spec("b", 10);
  }
  return requests;
}

proto::EndRunRequest End(uint64_t run, proto::RunStatus::State state,
                         int64_t steps, const std::string& error = "",
                         int64_t failed_step = -1) {
  proto::EndRunRequest request;
  request.set_run_id(run);
  request.set_state(state);
  request.set_steps(steps);
  request.set_error(error);
  request.set_failed_step(failed_step);
  return request;
}

constexpr auto kFinished = proto::RunStatus::STATE_FINISHED;
constexpr auto kFailed = proto::RunStatus::STATE_FAILED;

TEST(RunBook, BeginAnswersEveryRankTheSameRun) {
  RunBook book(0);
  ASSERT_OK_AND_ASSIGN(proto::BeginRunResponse r, book.Begin(Round(3), kT0));
  EXPECT_EQ(r.run_id(), 1u);
  EXPECT_EQ(r.first_op_seq(), 8u);  // max(5, 6, 7) + 1
  EXPECT_EQ(r.total_workers(), 6);
  EXPECT_EQ(r.parameter_count(), 1010u);
  ASSERT_EQ(r.tensors_size(), 2);
  EXPECT_EQ(r.tensors(0).name(), "w");
  ASSERT_NE(book.current(), nullptr);
  EXPECT_EQ(book.current()->state(), proto::RunStatus::STATE_RUNNING);
  EXPECT_EQ(book.current()->total_workers(), 6);
  EXPECT_EQ(book.current()->started_unix_seconds(), 1767225600.0);
}

TEST(RunBook, DifferingTablesNameTheTensorBothDeclarationsAndRanks) {
  RunBook book(0);
  std::vector<proto::BeginRunRequest> requests = Round(3);
  requests[2].mutable_tensors(0)->set_shape(0, 999);
  EXPECT_THAT(book.Begin(requests, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'w' declared as [1000] float32 by rank 0 but "
                       "as [999] float32 by rank 2"));
  EXPECT_EQ(book.current(), nullptr);
  // No id was used up.
  ASSERT_OK_AND_ASSIGN(proto::BeginRunResponse r, book.Begin(Round(3), kT0));
  EXPECT_EQ(r.run_id(), 1u);
}

TEST(RunBook, ARanksOwnErrorIsEveryonesError) {
  RunBook book(0);
  std::vector<proto::BeginRunRequest> requests = Round(2);
  requests[1].clear_tensors();
  requests[1].set_error(
      "tensor 'w' declared as [4] float32 by worker 0 of rank 1 but as [5] "
      "float32 by worker 1 of rank 1");
  EXPECT_THAT(
      book.Begin(requests, kT0),
      StatusIs(absl::StatusCode::kInvalidArgument, requests[1].error()));
}

TEST(RunBook, ParameterCountFlagMustMatchWhenSet) {
  RunBook strict(1000);
  EXPECT_THAT(strict.Begin(Round(2), kT0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the declared tensors hold 1010 elements but "
                                 "the job's parameter count is 1000 "
                                 "(starling-coordinator --parameter_count")));
  RunBook exact(1010);
  EXPECT_OK(exact.Begin(Round(2), kT0).status());
}

TEST(RunBook, RunFinishesWhenEveryRankFinished) {
  RunBook book(0);
  ASSERT_OK(book.Begin(Round(2), kT0).status());
  RunBook::Ended e = book.End(0, "rank 0", 2, End(1, kFinished, 40), kT0);
  EXPECT_FALSE(e.finished_now);
  ASSERT_NE(book.current(), nullptr);
  e = book.End(1, "rank 1", 2, End(1, kFinished, 41), kT0 + absl::Seconds(3));
  EXPECT_TRUE(e.finished_now);
  EXPECT_EQ(book.current(), nullptr);
  ASSERT_THAT(book.Recent(), SizeIs(1));
  EXPECT_EQ(book.Recent()[0].state(), kFinished);
  EXPECT_EQ(book.Recent()[0].steps(), 41);
  EXPECT_EQ(book.Recent()[0].ended_unix_seconds(), 1767225603.0);
}

TEST(RunBook, FirstFailureStaysAndIsToldToTheOthersUntilTheyKnow) {
  RunBook book(0);
  ASSERT_OK(book.Begin(Round(3), kT0).status());
  RunBook::Ended e =
      book.End(1, "rank 1 (node-1, 10.0.0.1:29500)", 3,
               End(1, kFailed, 7, "all-reduce timed out", 7), kT0);
  EXPECT_TRUE(e.failed_now);
  EXPECT_EQ(e.error,
            "rank 1 (node-1, 10.0.0.1:29500) step 7: all-reduce timed out");
  EXPECT_EQ(book.current(), nullptr);
  // An echo from another rank does not replace the first error.
  e = book.End(2, "rank 2", 3, End(1, kFailed, 7, "peer rank 1 aborted", 7),
               kT0);
  EXPECT_FALSE(e.failed_now);
  EXPECT_EQ(book.Recent()[0].error(), e.error);

  // Rank 0 still runs run 1: it hears of the failure; 1 and 2 reported it.
  proto::RunStatus running;
  running.set_run_id(1);
  running.set_state(proto::RunStatus::STATE_RUNNING);
  const std::vector<proto::RunFailure> told = book.FailuresFor(0, running);
  ASSERT_THAT(told, SizeIs(1));
  EXPECT_EQ(told[0].run_id(), 1u);
  EXPECT_EQ(told[0].rank(), 1);
  EXPECT_EQ(told[0].step(), 7);
  EXPECT_THAT(told[0].error(), HasSubstr("all-reduce timed out"));
  EXPECT_THAT(book.FailuresFor(1, running), IsEmpty());
  EXPECT_THAT(book.FailuresFor(2, running), IsEmpty());
  // Once it noticed (its heartbeat says FAILED) or moved on, it is not told.
  proto::RunStatus noticed = running;
  noticed.set_state(kFailed);
  EXPECT_THAT(book.FailuresFor(0, noticed), IsEmpty());
  proto::RunStatus later;
  later.set_run_id(2);
  EXPECT_THAT(book.FailuresFor(0, later), IsEmpty());
}

TEST(RunBook, ANewRoundEndsARunStillRecordedAsRunning) {
  RunBook book(0);
  ASSERT_OK(book.Begin(Round(2), kT0).status());
  ASSERT_OK_AND_ASSIGN(proto::BeginRunResponse second,
                       book.Begin(Round(2), kT0));
  EXPECT_EQ(second.run_id(), 2u);
  ASSERT_THAT(book.Recent(), SizeIs(1));
  EXPECT_EQ(book.Recent()[0].run_id(), 1u);
  EXPECT_EQ(book.Recent()[0].state(), kFinished);
}

TEST(RunBook, KeepsTheLastFewRunsNewestFirstAndNeverReusesIds) {
  RunBook book(0);
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK_AND_ASSIGN(proto::BeginRunResponse r, book.Begin(Round(1), kT0));
    EXPECT_EQ(r.run_id(), static_cast<uint64_t>(i + 1));
    book.End(0, "rank 0", 1, End(r.run_id(), kFinished, i), kT0);
  }
  const std::vector<proto::RunStatus> recent = book.Recent();
  ASSERT_THAT(recent, SizeIs(RunBook::kRecentRuns));
  EXPECT_EQ(recent.front().run_id(), 12u);
  EXPECT_EQ(recent.back().run_id(), 5u);
}

TEST(RunBook, FailCurrentForALostRank) {
  RunBook book(0);
  EXPECT_FALSE(book.FailCurrent(2, "rank 2 lost", kT0));
  ASSERT_OK(book.Begin(Round(3), kT0).status());
  EXPECT_TRUE(book.FailCurrent(2, "rank 2 lost", kT0));
  EXPECT_EQ(book.Recent()[0].error(), "rank 2 lost");
  proto::RunStatus running;
  running.set_run_id(1);
  running.set_state(proto::RunStatus::STATE_RUNNING);
  ASSERT_THAT(book.FailuresFor(0, running), SizeIs(1));
  EXPECT_EQ(book.FailuresFor(0, running)[0].rank(), 2);
}

TEST(RunBook, AdoptionContinuesIdsAboveWhatNodesReport) {
  RunBook book(0);
  proto::RunStatus run;
  run.set_run_id(41);
  run.set_state(proto::RunStatus::STATE_RUNNING);
  run.set_steps(300);
  run.set_total_workers(8);
  book.Adopt(run, 41, 4);
  ASSERT_NE(book.current(), nullptr);
  EXPECT_EQ(book.current()->run_id(), 41u);
  EXPECT_EQ(book.current()->steps(), 300);
  book.Adopt(proto::RunStatus(), 43, 4);  // a node that saw run 43 end
  EXPECT_EQ(book.next_run_id(), 44u);
  ASSERT_OK_AND_ASSIGN(proto::BeginRunResponse r, book.Begin(Round(4), kT0));
  EXPECT_EQ(r.run_id(), 44u);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
