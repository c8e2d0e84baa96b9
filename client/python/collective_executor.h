// The background thread of a process's torch.distributed backend
// (starling/torch/_backend.so): it runs the backend's ops one at a time, in
// the order they were submitted by every process group of the process, on
// the client's collective table (collective_api.h).
//
// An op is a body that stages tensors into pool memory (Context::Scratch),
// runs one or more collectives on it (Context::Collective, which waits for
// each) and copies the results out, followed by a `done` callback with its
// status. One thread keeps the daemons' view simple (ops reach the client
// in call order, as every worker issues them) and lets one scratch region
// serve every op.
//
// Errors: a collective's failure is the op's status (the daemon's text, with
// its code). A collective that did not finish within
// Options::collective_timeout may still write its scratch memory and leaves
// the daemons in a state this process cannot know: that error is sticky,
// every later op fails with it (LevelDB's bg_error_).
//
// Thread-safe.
#ifndef STARLING_CLIENT_PYTHON_COLLECTIVE_EXECUTOR_H_
#define STARLING_CLIENT_PYTHON_COLLECTIVE_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/python/collective_api.h"

namespace starling {
namespace torch_backend {

class CollectiveExecutor {
 public:
  struct Options {
    // How long one collective may take before the op fails with
    // DeadlineExceeded (sticky, see above): the client's own timeout
    // (STARLING_TIMEOUT) plus a little, so that the client's error, which
    // names who did not answer, normally comes first.
    absl::Duration collective_timeout = absl::Seconds(62);
    // The scratch region grows to max(needed, 2 x its size, this): pool
    // allocations are never given back, so it grows geometrically.
    size_t min_scratch_bytes = size_t{64} << 20;
  };

  // What an op's body may do; valid only during the body, on the executor
  // thread.
  class Context {
   public:
    // Pool memory of at least `bytes`, valid until the body returns (the
    // next op reuses it). ResourceExhausted (saying how to grow the pool)
    // when the pool is full.
    absl::StatusOr<absl::Span<std::byte>> Scratch(size_t bytes);
    // Runs one collective on `data` (inside Scratch()) and waits for it.
    // `op` for all-reduce and reduce-scatter, `root` (a slot) for
    // broadcast. The collective's status; DeadlineExceeded after
    // Options::collective_timeout.
    absl::Status Collective(StarlingCollectiveKind kind,
                            absl::Span<std::byte> data, StarlingDataType type,
                            StarlingReduceOp op = STARLING_SUM, int root = 0);
    // The client's view of the job (after the first collective).
    int total_workers() const;
    int slot() const;

   private:
    friend class CollectiveExecutor;
    explicit Context(CollectiveExecutor& executor) : executor_(executor) {}
    CollectiveExecutor& executor_;
  };

  struct Op {
    // For messages: "allreduce (op 12, 4096 bytes)".
    std::string name;
    // Runs on the executor thread.
    std::function<absl::Status(Context&)> body;
    // Called once with the op's status: on the executor thread after the
    // body, or at once (on Submit's or Shutdown's caller) for an op that
    // does not run. Must not block on another op of this executor.
    std::function<void(const absl::Status&)> done;
  };

  // `api` must stay valid while this object lives; `api_owner` keeps it
  // so and is released last, by the destructor (null: nothing to keep).
  CollectiveExecutor(const StarlingCollectiveApi* api,
                     std::shared_ptr<void> api_owner, Options options);
  // Shutdown(), then releases api_owner.
  ~CollectiveExecutor();
  CollectiveExecutor(const CollectiveExecutor&) = delete;
  CollectiveExecutor& operator=(const CollectiveExecutor&) = delete;

  // Queues `op` after every op submitted before it; after Shutdown() its
  // done gets FailedPrecondition at once.
  void Submit(Op op);

  // Fails the ops not started yet (FailedPrecondition), waits for the one
  // running and stops the thread. Idempotent.
  void Shutdown();

  const Options& options() const { return options_; }

 private:
  // One collective in flight: completed by the table's done callback on
  // the client's thread, waited for by the executor thread. Shared because
  // a collective that timed out completes after its waiter left.
  struct Pending;
  static void OnCollectiveDone(void* arg, int code, const char* message);

  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<absl::Span<std::byte>> Scratch(size_t bytes);
  absl::Status Collective(StarlingCollectiveKind kind,
                          absl::Span<std::byte> data, StarlingDataType type,
                          StarlingReduceOp op, int root);

  const StarlingCollectiveApi* const api_;
  std::shared_ptr<void> api_owner_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Executor thread only.
  std::byte* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  absl::Status sticky_;  // a collective that timed out

  std::thread thread_;
};

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_COLLECTIVE_EXECUTOR_H_
