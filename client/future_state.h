// FutureState: the shared state behind client::Future. Completed once by
// the client's reader thread (or by the caller when sending fails), with
// the daemon's response kept here, so that nothing points into a caller's
// stack after a Wait() timed out. Thread-safe.
#ifndef STARLING_CLIENT_FUTURE_STATE_H_
#define STARLING_CLIENT_FUTURE_STATE_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace starling {
namespace client {
namespace internal {

class FutureState {
 public:
  // `what` names the op in a Wait() timeout ("push_gradients step 3 ...").
  explicit FutureState(std::string what) : what_(std::move(what)) {}

  // The first call wins; later ones are ignored. Runs the callbacks on the
  // calling thread, without holding the lock.
  void Complete(absl::Status status,
                proto::WorkerResponse response = proto::WorkerResponse());
  // The response it completed with (empty before, or if it failed locally).
  proto::WorkerResponse response() const;

  bool done() const;
  absl::Status Wait(absl::Time deadline) const;
  void Then(std::function<void(const absl::Status&)> callback);

 private:
  const std::string what_;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  proto::WorkerResponse response_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const absl::Status&)>> callbacks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace internal
}  // namespace client
}  // namespace starling

#endif  // STARLING_CLIENT_FUTURE_STATE_H_
