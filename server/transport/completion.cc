#include "server/transport/completion.h"

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {

Completion::~Completion() {
  absl::MutexLock lock(&mu_);
  STARLING_CHECK(pending_ == 0)
      << "completion destroyed with " << pending_ << " operation(s) pending";
}

void Completion::Add(int n) {
  absl::MutexLock lock(&mu_);
  pending_ += n;
}

void Completion::Finish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  STARLING_CHECK(pending_ > 0) << "Finish() without a pending operation";
  --pending_;
  if (!status.ok() && status_.ok()) status_ = status;
}

absl::Status Completion::Wait(absl::Time deadline, const std::string& what) {
  const absl::Time start = absl::Now();
  absl::MutexLock lock(&mu_);
  auto done = [this]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(pending_, " operation(s) still pending after ",
                     absl::FormatDuration(absl::Now() - start),
                     what.empty() ? "" : ": ", what));
  }
  return status_;
}

int Completion::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

}  // namespace transport
}  // namespace starling
