// WorkerSession: one attached worker process, seen from its node daemon.
// It owns the unix-socket connection and the worker's shared-memory pool
// (mapped from the sealed memfd passed at Hello), and runs two threads: a
// reader that parses and checks requests (proto/worker.proto,
// worker_request_check.h) and hands them to a WorkerRequestHandler, and a
// writer that sends the replies queued on the session's Responder. Requests
// of one worker are handled in arrival order; the handler answers through
// the Responder, from any thread, in any order, without ever blocking on
// the socket: a worker that stops reading fills only its own queue, and
// past kMaxQueuedReplyBytes its session is closed (the worker counts as
// gone).
//
// Lifetimes: the socket is closed only after both threads have ended, so
// no reply can be written to a closed or reused descriptor; a Responder
// that outlives its session (a queued round still holds it) drops replies.
//
// Thread safety: WorkerSession is confined to its owner (WorkerServer)
// except for its threads; WorkerPool and Responder are thread-safe.
#ifndef STARLING_SERVER_NODE_WORKER_WORKER_SESSION_H_
#define STARLING_SERVER_NODE_WORKER_WORKER_SESSION_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace node {

// Replies queued for one worker beyond this are not sent: the session
// closes (a worker that does not read its replies is treated as gone).
inline constexpr size_t kMaxQueuedReplyBytes = size_t{16} << 20;

// The worker's pool as mapped in the daemon. Thread-safe (immutable).
class WorkerPool {
 public:
  // Maps `fd` of `bytes`. InvalidArgument if the descriptor is
  // not a memfd sealed against shrinking (F_SEAL_SHRINK: otherwise the
  // worker could truncate it under the daemon, which would then fault on
  // the next access), or is smaller than announced; Internal for mmap
  // failures.
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Map(ScopedFd fd,
                                                         size_t bytes);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  size_t size_bytes() const { return size_; }

  // The floats of `slice`; InvalidArgument (naming the tensor, offset,
  // length and pool size) when it is misaligned or leaves the pool.
  absl::StatusOr<absl::Span<float>> Floats(const proto::PoolSlice& slice) const;
  // The bytes of `slice` for elements of `element_bytes` (2 or 4) each;
  // the same errors.
  absl::StatusOr<absl::Span<std::byte>> Bytes(const proto::PoolSlice& slice,
                                              size_t element_bytes) const;

 private:
  WorkerPool(ScopedFd fd, std::byte* base, size_t size)
      : fd_(std::move(fd)), base_(base), size_(size) {}
  const ScopedFd fd_;
  std::byte* const base_;
  const size_t size_;
};

// Queues replies to one worker; the session's writer thread sends them.
// Thread-safe; Reply() never blocks on I/O.
class Responder {
 public:
  Responder() = default;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  // Replies never sent close their descriptors.
  ~Responder() = default;

  // Queues `response` with `id` and `status`, and `pass_fd` (if valid) to
  // send with it as SCM_RIGHTS. Dropped (the descriptor closed) once the
  // session closed (the worker is gone; its reader thread reports that).
  void Reply(uint64_t id, const absl::Status& status,
             proto::WorkerResponse response = proto::WorkerResponse(),
             ScopedFd pass_fd = ScopedFd());

  // For the session's writer thread: blocks until a frame is queued (sets
  // `frame` and `pass_fd`, none if it has none; returns true) or the
  // session closed and nothing is left to send (returns false).
  bool Next(std::string* frame, ScopedFd* pass_fd);
  // No more replies are queued; Next() returns false once drained.
  void Close();
  // True once the queue overflowed (the writer closes the socket).
  bool overflowed() const;

 private:
  mutable absl::Mutex mu_;
  struct Queued {
    std::string frame;
    ScopedFd pass_fd;
  };
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
};

// One attached worker, as handed to the handler. Value type; the pool and
// responder are shared with the session, as a queued request may outlive
// the connection (the worker's memory stays mapped until the last user of
// the pool lets go).
struct WorkerHandle {
  // Unique per connection for the daemon's life: tells a replacement from
  // the worker it replaces.
  uint64_t session = 0;
  int index = -1;
  std::string name;
  // From the socket's peer credentials; 0 if unknown.
  pid_t pid = 0;
  std::shared_ptr<WorkerPool> pool;
  std::shared_ptr<Responder> responder;
};

// What the daemon does with requests. Implementations are thread-safe:
// every session's reader thread calls in.
class WorkerRequestHandler {
 public:
  virtual ~WorkerRequestHandler() = default;
  // A worker said Hello (its pool is mapped). Returns the reply, or an
  // error (AlreadyExists, InvalidArgument, FailedPrecondition) to refuse it.
  virtual absl::StatusOr<proto::HelloReply> Attach(
      const WorkerHandle& worker, const proto::HelloRequest& hello) = 0;
  // Handles any checked request after Hello; answers through
  // worker.responder, now or later. Runs on the worker's reader thread;
  // may block that worker's later requests, never the daemon.
  virtual void Handle(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) = 0;
  // The worker's connection closed (after a successful Attach).
  virtual void Detach(const WorkerHandle& worker) = 0;
};

class WorkerSession {
 public:
  // Takes `fd` (a connected unix socket) and starts the threads.
  // `handler` is borrowed and must outlive the session.
  WorkerSession(ScopedFd fd, uint64_t session, WorkerRequestHandler* handler);
  // Shuts the socket down, joins both threads, then closes it.
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  // True once the reader thread has ended (the worker left).
  bool finished() const {
    // acquire: pairs with the reader's release store at its end.
    return finished_.load(std::memory_order_acquire);
  }

 private:
  void ReadLoop();
  void WriteLoop();
  // Hello: maps the pool and attaches. Returns the handle on success.
  absl::StatusOr<WorkerHandle> Hello(const proto::WorkerRequest& request,
                                     ScopedFd received_fd);

  const ScopedFd fd_;
  const uint64_t session_;
  WorkerRequestHandler* const handler_;
  const std::shared_ptr<Responder> responder_;
  std::atomic<bool> finished_{false};
  std::thread reader_;
  std::thread writer_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_WORKER_WORKER_SESSION_H_
