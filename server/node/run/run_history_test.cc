// What a worker's request of a run that ended is told: a failed run names
// its failure, a suspended one (its group lost a daemon) says it may go on
// and how to resume, a finished one how to begin the next.
#include "server/node/run/run_history.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/common.pb.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

proto::RunStatus Ended(uint64_t run_id, proto::RunStatus::State state,
                       int64_t steps, bool suspended) {
  proto::RunStatus status;
  status.set_run_id(run_id);
  status.set_state(state);
  status.set_steps(steps);
  status.set_suspended(suspended);
  status.set_error("step 27 on rank 0: rank 1 closed the connection");
  return status;
}

TEST(RunHistory, ARequestOfAnEndedRunIsToldHowItEnded) {
  RunHistory history(4);
  history.Record(Ended(1, proto::RunStatus::STATE_FAILED, 27, false));
  history.Record(Ended(2, proto::RunStatus::STATE_FAILED, 27, true));
  history.Record(Ended(3, proto::RunStatus::STATE_FINISHED, 40, false));
  EXPECT_THAT(history.StaleRunError(1),
              StatusIs(absl::StatusCode::kAborted,
                       AllOf(HasSubstr("run 1 failed at step 27: step 27 on "
                                       "rank 0: rank 1 closed the connection"),
                             Not(HasSubstr("Rejoin")))));
  EXPECT_THAT(
      history.StaleRunError(2),
      StatusIs(absl::StatusCode::kAborted,
               AllOf(HasSubstr("run 2 stopped at step 27: step 27 on "
                               "rank 0: rank 1 closed the connection"),
                     HasSubstr("goes on in the re-formed group"),
                     HasSubstr("reconnect to resume (Client::Rejoin)"))));
  EXPECT_THAT(history.StaleRunError(3),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("run 3 finished after 40 steps")));
  EXPECT_THAT(history.StaleRunError(9),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("run 9 is over")));
}

}  // namespace
}  // namespace node
}  // namespace starling
