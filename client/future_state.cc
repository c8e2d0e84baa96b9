#include "client/future_state.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace starling {
namespace client {
namespace internal {

void FutureState::Complete(absl::Status status,
                           proto::WorkerResponse response) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    status_ = status;
    response_ = std::move(response);
    callbacks.swap(callbacks_);
  }
  for (auto& callback : callbacks) callback(status);
}

proto::WorkerResponse FutureState::response() const {
  absl::MutexLock lock(&mu_);
  return response_;
}

bool FutureState::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

absl::Status FutureState::Wait(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(&done_), deadline);
  if (!done_) {
    return absl::DeadlineExceededError(
        absl::StrCat(what_, ": not finished by the deadline"));
  }
  return status_;
}

void FutureState::Then(std::function<void(const absl::Status&)> callback) {
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
    status = status_;
  }
  callback(status);
}

}  // namespace internal
}  // namespace client
}  // namespace starling
