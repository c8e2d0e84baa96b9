// StatePersister: writes the coordinator's record (a StateStore) on a thread
// of its own, so that no coordinator call waits on the disk and no lock is
// held across a write. Changes are announced (Changed) and coalesced: the
// thread takes a snapshot when it is free and writes it, so the file holds
// the latest record within about one write's time. A failed write is
// logged (once per distinct error) and retried with the next change or
// at Stop.
//
// Thread-safe. `snapshot` runs on the persister's thread holding none of
// its locks (it may take the caller's lock: Changed may be called under
// that lock, never the reverse).
#ifndef STARLING_SERVER_COORDINATOR_STATE_PERSISTER_H_
#define STARLING_SERVER_COORDINATOR_STATE_PERSISTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator_state.pb.h"
#include "server/coordinator/state_store.h"

namespace starling {
namespace coordinator {

class StatePersister {
 public:
  // `on_written` (may be null) is told each write's result, on the
  // persister's thread.
  StatePersister(std::unique_ptr<StateStore> store,
                 std::function<proto::CoordinatorState()> snapshot,
                 std::function<void(const absl::Status&)> on_written = nullptr);
  // Stop().
  ~StatePersister();
  StatePersister(const StatePersister&) = delete;
  StatePersister& operator=(const StatePersister&) = delete;

  // The record changed; returns at once.
  void Changed();
  // Writes the latest record if a change is unwritten, then ends the
  // thread. Idempotent.
  void Stop();
  // Waits until every change announced before the call is written: OK, the
  // last write's error, or DeadlineExceeded.
  absl::Status Flush(absl::Time deadline);

  const std::string& where() const { return store_->where(); }

 private:
  void Loop();

  const std::unique_ptr<StateStore> store_;
  const std::function<proto::CoordinatorState()> snapshot_;
  const std::function<void(const absl::Status&)> on_written_;
  std::thread thread_;

  absl::Mutex mu_;
  // Changes announced, and the last one whose record was written (or whose
  // write failed: `error`).
  uint64_t announced_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_STATE_PERSISTER_H_
