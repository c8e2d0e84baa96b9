#include "server/collective/cancellation.h"

#include <utility>

namespace starling {
namespace collective {

void Cancellation::Cancel(absl::Status why) {
  absl::MutexLock lock(&mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return;
  why_ = std::move(why);
  cancelled_.store(true, std::memory_order_release);
}

absl::Status Cancellation::status() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

}  // namespace collective
}  // namespace starling
