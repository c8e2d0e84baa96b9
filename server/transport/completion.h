// Completion: counts a batch of outstanding asynchronous operations (posted
// writes) and lets one thread wait for all of them, with a deadline.
//
//   Completion done;
//   transport->Write(peer, chunk0, region, 0, 0, &done);
//   transport->Write(peer, chunk1, region, n, 1, &done);
//   STARLING_RETURN_IF_ERROR(done.Wait(deadline));
//
// Write() calls Add(1) before it returns and Finish() once the operation is
// over. The first error is kept; Wait() returns it after every operation has
// finished. Thread-safe. A Completion must outlive the operations it counts;
// destroying one with operations pending is a bug (checked).
#ifndef STARLING_SERVER_TRANSPORT_COMPLETION_H_
#define STARLING_SERVER_TRANSPORT_COMPLETION_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace starling {
namespace transport {

class Completion {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  ~Completion();

  // Called by a transport when an operation is posted.
  void Add(int n = 1);

  // Called by a transport when an operation ends; keeps the first error.
  void Finish(const absl::Status& status);

  // Blocks until every posted operation has finished; returns the first
  // error, or DeadlineExceeded ("<n> operation(s) still pending after <d>:
  // <what>") when `deadline` passes first. `what` names the peers involved,
  // e.g. "writes to rank 2 (10.77.0.3:29502)".
  absl::Status Wait(absl::Time deadline, const std::string& what = "");

  // Number of operations not yet finished.
  int pending() const;

 private:
  mutable absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_COMPLETION_H_
