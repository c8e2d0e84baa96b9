// WorkerServer: the daemon's unix-domain socket for its local workers
// (--worker_socket). Listen() binds it before the daemon joins its group,
// so that a clash fails at once; Serve() starts the accept thread once the
// daemon can answer workers (who connect earlier wait in the backlog). One
// WorkerSession (reader and writer threads) per connected worker.
//
// The path: a socket file nobody listens on (left by a dead daemon) is
// replaced; one that accepts belongs to a live daemon and is refused; a
// path that exists and is not a socket is refused and left alone. A lock
// file beside it (PATH.lock, flock) makes two daemons starting at once on
// the same path safe: the second is refused.
//
// Thread-safe.
#ifndef STARLING_SERVER_NODE_WORKER_WORKER_SERVER_H_
#define STARLING_SERVER_NODE_WORKER_WORKER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/base/scoped_fd.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

class WorkerServer {
 public:
  // Binds and listens at `path`. Errors name the path: FailedPrecondition
  // if it exists and is not a socket; AlreadyExists if another daemon
  // serves it; Unavailable / InvalidArgument if it cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Listen(
      const std::string& path);
  // Starts accepting workers. `handler` is borrowed and must outlive the
  // server. Call at most once.
  void Serve(WorkerRequestHandler* handler);
  // Listen() then Serve().
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(
      const std::string& path, WorkerRequestHandler* handler);
  // Stop().
  ~WorkerServer();
  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  // Stops accepting, closes every session and removes the socket file.
  // Idempotent.
  void Stop();

 private:
  WorkerServer(std::string path, ScopedFd listen_fd, ScopedFd lock_fd);
  void AcceptLoop(WorkerRequestHandler* handler);

  const std::string path_;
  // Closed by Stop().
  ScopedFd listen_fd_;
  ScopedFd lock_fd_;
  std::thread acceptor_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::unique_ptr<WorkerSession>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_WORKER_WORKER_SERVER_H_
