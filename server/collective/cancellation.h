// Cancellation: a one-shot signal that ends a running collective op early
// with a caller-given status, e.g. when another rank reported that the
// training run this op belongs to failed (server/node/sync/sync_engine.h). The
// op notices within kCancellationPollInterval of Cancel() at the latest,
// fails with the status (annotated with the op), and leaves the transport
// usable: unlike Transport::AbortPeer, nothing becomes sticky.
//
// Thread-safe: Cancel() from any thread; the op's thread polls.
#ifndef STARLING_SERVER_COLLECTIVE_CANCELLATION_H_
#define STARLING_SERVER_COLLECTIVE_CANCELLATION_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace starling {
namespace collective {

// How long a wait of a cancellable op sleeps before it looks again.
inline constexpr absl::Duration kCancellationPollInterval =
    absl::Milliseconds(20);

class Cancellation {
 public:
  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // The first call wins. REQUIRES: !why.ok().
  void Cancel(absl::Status why);
  bool cancelled() const {
    // acquire: pairs with the release store in Cancel(), so status() sees
    // the reason once this returns true.
    return cancelled_.load(std::memory_order_acquire);
  }
  // Ok until cancelled; then the reason.
  absl::Status status() const;

 private:
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_CANCELLATION_H_
