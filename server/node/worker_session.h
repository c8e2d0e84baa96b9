// WorkerSession: one attached worker process, seen from its node daemon.
// It owns the unix-socket connection and the worker's shared-memory pool
// (mapped from the memfd passed at Hello), and runs one reader thread that
// parses requests (proto/worker.proto) and hands them to a
// WorkerRequestHandler. Requests of one worker are handled in arrival
// order; the handler answers through the worker's Responder, from any
// thread, in any order.
//
// Thread safety: WorkerSession is confined to its owner (WorkerServer)
// except for its reader thread; WorkerPool and Responder are thread-safe.
#ifndef STARLING_SERVER_NODE_WORKER_SESSION_H_
#define STARLING_SERVER_NODE_WORKER_SESSION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"

namespace starling {
namespace node {

// The worker's pool as mapped in the daemon. Thread-safe (immutable).
class WorkerPool {
 public:
  // Maps `fd` (taken over) of `bytes`. InvalidArgument if the memfd is
  // smaller than announced; Internal for mmap failures.
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Map(int fd, size_t bytes);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The floats of `slice`; InvalidArgument (naming the tensor, offset,
  // length and pool size) when it is misaligned or leaves the pool.
  absl::StatusOr<absl::Span<float>> Floats(const proto::PoolSlice& slice) const;

 private:
  WorkerPool(int fd, std::byte* base, size_t size)
      : fd_(fd), base_(base), size_(size) {}
  const int fd_;
  std::byte* const base_;
  const size_t size_;
};

// Sends responses to one worker. Thread-safe.
class Responder {
 public:
  explicit Responder(int fd) : fd_(fd) {}
  // Sends `response` with `id` and `status`; a failed send means the worker
  // is gone, which its reader thread notices: the error is dropped.
  void Reply(uint64_t id, const absl::Status& status,
             proto::WorkerResponse response = proto::WorkerResponse());

 private:
  const int fd_;
  absl::Mutex mu_;  // one frame at a time
};

// One attached worker, as handed to the handler. Value type; the pool and
// responder are shared with the session, as a queued request may outlive
// the connection (the worker's memory stays mapped until the last user of
// the pool lets go).
struct WorkerHandle {
  int index = -1;
  std::string name;
  std::shared_ptr<WorkerPool> pool;
  std::shared_ptr<Responder> responder;
};

// What the daemon does with requests. Implementations are thread-safe:
// every session's reader thread calls in.
class WorkerRequestHandler {
 public:
  virtual ~WorkerRequestHandler() = default;
  // A worker said Hello. AlreadyExists / InvalidArgument to refuse it.
  virtual absl::StatusOr<proto::HelloReply> Attach(
      const proto::HelloRequest& hello) = 0;
  // Handles any request after Hello; answers through worker.responder,
  // now or later. Runs on the worker's reader thread; may block that
  // worker's later requests, never the daemon.
  virtual void Handle(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) = 0;
  // The worker's connection closed (after a successful Attach).
  virtual void Detach(int index) = 0;
};

class WorkerSession {
 public:
  // Takes over `fd` (a connected unix socket) and starts the reader.
  // `handler` is borrowed and must outlive the session.
  WorkerSession(int fd, WorkerRequestHandler* handler);
  // Shuts the socket down and joins the reader.
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
  // Hello: maps the pool and attaches. Returns the handle on success.
  absl::StatusOr<WorkerHandle> Hello(const proto::WorkerRequest& request,
                                     int received_fd);

  const int fd_;
  WorkerRequestHandler* const handler_;
  std::shared_ptr<Responder> responder_;
  std::atomic<bool> finished_{false};
  std::thread reader_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_WORKER_SESSION_H_
