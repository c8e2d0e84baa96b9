// The background thread of a process's torch.distributed backend
// (starling/torch/_backend.so): it runs the backend's ops in the order they
// were submitted by every process group of the process, on the client's
// collective table (collective_api.h).
//
// An op is a body that stages tensors into pool memory (Context::Scratch)
// and runs collectives on it, followed by a `done` callback with its
// status. A body either waits for each collective (Context::Collective)
// and copies the results out itself, or ends by launching one
// (Context::Launch) with a `finish` that copies them out once it completes:
// then the next op's body runs while that collective is in flight, so that
// DDP's buckets follow one another on the daemons with no gap (the next
// bucket staged and queued while one is reduced), as Gloo's overlap. Up to
// Options::max_in_flight launched collectives are in flight, each in its own
// scratch region; ops still end, `finish` and `done` included, in
// submission order. Collectives reach the client in call order, as every
// worker issues them.
//
// Errors: a collective's failure is the op's status (the daemon's text, with
// its code). A collective that did not finish within
// Options::collective_timeout may still write its scratch memory and leaves
// the daemons in a state this process cannot know: that error is sticky,
// every later op, in flight or not started, fails with it (LevelDB's
// bg_error_), and that region is never used again.
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
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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
    // Launched collectives in flight at most (>= 1), each holding a
    // scratch region until its op ends; a body that needs scratch memory
    // while every region is held waits for the oldest.
    int max_in_flight = 3;
  };

  // What an op's body may do; valid only during the body, on the executor
  // thread.
  class Context {
   public:
    // Pool memory of at least `bytes`, valid until the body returns (the
    // next op reuses it). ResourceExhausted (saying how to grow the pool)
    // when the pool is full.
    absl::StatusOr<absl::Span<std::byte>> Scratch(size_t bytes);
    // Runs one collective on `data` (inside Scratch()) and waits for it,
    // after the ops in flight ended. `op` for all-reduce and
    // reduce-scatter, `root` (a slot) for broadcast. The collective's
    // status; DeadlineExceeded after Options::collective_timeout.
    absl::Status Collective(StarlingCollectiveKind kind,
                            absl::Span<std::byte> data, StarlingDataType type,
                            StarlingReduceOp op = STARLING_SUM, int root = 0);
    // Starts one collective on `data` (inside Scratch()) and returns at
    // once: the body's last use of the context, after which it returns.
    // The op ends when the collective does: `finish` runs then, on the
    // executor thread, if it succeeded (and the body returned OK), and the
    // op's status is the first error of the body, the collective and
    // `finish`. The scratch region stays the op's until then.
    // FailedPrecondition (the op's status) when the body launched already.
    absl::Status Launch(StarlingCollectiveKind kind, absl::Span<std::byte> data,
                        StarlingDataType type, StarlingReduceOp op, int root,
                        std::function<absl::Status()> finish);
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
    // The memory the op reads or writes, as [begin, end) addresses. Its
    // body runs while ops are in flight only when none of theirs overlaps
    // (an op that reads what an earlier one's `finish` still has to write
    // waits for it); empty: not known, every op in flight ends first.
    std::vector<std::pair<uintptr_t, uintptr_t>> touches;
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
  // The queue, and the completions of collectives, under one mutex: the
  // table's done callbacks (on the client's thread) hold it too, and may
  // run after this object is gone (a collective that timed out).
  struct Shared;
  // One collective started: completed by the table's done callback.
  struct Pending;
  // An op whose body launched its collective, until it ends.
  struct InFlight {
    std::string name;
    StarlingCollectiveKind kind = STARLING_ALL_REDUCE;
    size_t bytes = 0;
    std::shared_ptr<Pending> pending;
    std::function<absl::Status()> finish;
    std::function<void(const absl::Status&)> done;
    absl::Status body_status;
    int region = -1;
    absl::Time deadline;
    std::vector<std::pair<uintptr_t, uintptr_t>> touches;
  };
  // A scratch region of pool memory.
  struct Region {
    std::byte* data = nullptr;
    size_t bytes = 0;
    // Held by an op in flight, or for good by a collective that timed out.
    bool held = false;
  };

  static void OnCollectiveDone(void* arg, int code, const char* message);
  // Starts a collective; its Pending.
  std::shared_ptr<Pending> Start(StarlingCollectiveKind kind,
                                 absl::Span<std::byte> data,
                                 StarlingDataType type, StarlingReduceOp op,
                                 int root);
  // Waits for `pending` until `deadline`: its status, or DeadlineExceeded
  // (made sticky) naming the collective.
  absl::Status Await(const std::shared_ptr<Pending>& pending,
                     StarlingCollectiveKind kind, size_t bytes,
                     absl::Time deadline);

  void Loop();
  // Runs one op's body; it ends now or goes in flight.
  void Run(Op& op);
  // Ends the oldest op in flight (waiting for its collective), or every
  // one of them.
  void FinishOldest();
  void DrainInFlight();
  // The error of op `name` once a collective timed out; `how` ("not
  // started, " or "") comes before the reason.
  absl::Status StickyError(const std::string& name,
                           absl::string_view how) const;
  // Options::max_in_flight, at least 1.
  int MaxInFlight() const;
  // True when an op touching `touches` must wait for the ops in flight.
  bool MustWaitForInFlight(
      const std::vector<std::pair<uintptr_t, uintptr_t>>& touches) const;
  absl::StatusOr<absl::Span<std::byte>> Scratch(size_t bytes);
  absl::Status Collective(StarlingCollectiveKind kind,
                          absl::Span<std::byte> data, StarlingDataType type,
                          StarlingReduceOp op, int root);
  absl::Status Launch(StarlingCollectiveKind kind, absl::Span<std::byte> data,
                      StarlingDataType type, StarlingReduceOp op, int root,
                      std::function<absl::Status()> finish);

  const StarlingCollectiveApi* const api_;
  std::shared_ptr<void> api_owner_;
  const Options options_;
  const std::shared_ptr<Shared> shared_;

  // Executor thread only.
  std::vector<Region> regions_;
  std::deque<InFlight> in_flight_;
  // The op whose body runs: its region (-1: none yet) and what it
  // launched (pending == null: nothing).
  int body_region_ = -1;
  InFlight body_launch_;
  absl::Status sticky_;  // a collective that timed out

  std::thread thread_;
};

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_COLLECTIVE_EXECUTOR_H_
