#include "server/node/run/run_history.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace starling {
namespace node {

double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

proto::RunStatus RunStatusOf(const Run& run, proto::RunStatus::State state,
                             int64_t steps) {
  proto::RunStatus status;
  status.set_run_id(run.id);
  status.set_state(state);
  status.set_steps(steps);
  status.set_parameter_count(run.layout.total_elements);
  status.set_total_workers(run.total_workers);
  status.set_started_unix_seconds(UnixSeconds(run.started));
  return status;
}

absl::Status FailedRunError(const proto::RunStatus& status) {
  if (status.suspended()) {
    // Its group lost a daemon: the run may go on in the re-formed group.
    return absl::AbortedError(absl::StrCat(
        "run ", status.run_id(), " stopped at step ", status.steps(), ": ",
        status.error(),
        "; it goes on in the re-formed group from its last committed step: "
        "reconnect to resume (Client::Rejoin)"));
  }
  return absl::AbortedError(absl::StrCat("run ", status.run_id(),
                                         " failed at step ", status.steps(),
                                         ": ", status.error()));
}

RunHistory::RunHistory(int capacity) : capacity_(std::max(1, capacity)) {}

void RunHistory::Record(const proto::RunStatus& status) {
  runs_.push_back(status);
  while (static_cast<int>(runs_.size()) > capacity_) runs_.pop_front();
}

absl::Status RunHistory::StaleRunError(uint64_t run_id) const {
  for (auto it = runs_.rbegin(); it != runs_.rend(); ++it) {
    if (it->run_id() != run_id) continue;
    if (it->state() == proto::RunStatus::STATE_FAILED) {
      return FailedRunError(*it);
    }
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run_id, " finished after ", it->steps(),
                     " steps; declare tensors to start the next run"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("run ", run_id, " is over"));
}

std::vector<proto::RunStatus> RunHistory::Recent() const {
  return std::vector<proto::RunStatus>(runs_.rbegin(), runs_.rend());
}

const proto::RunStatus* RunHistory::last() const {
  return runs_.empty() ? nullptr : &runs_.back();
}

}  // namespace node
}  // namespace starling
