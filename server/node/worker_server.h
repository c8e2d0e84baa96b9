// WorkerServer: the daemon's unix-domain socket for its local workers
// (--worker_socket). One accept thread; one WorkerSession (with its reader
// thread) per connected worker. A stale socket file (nobody listening) is
// replaced; a live one is an error. Thread-safe.
#ifndef STARLING_SERVER_NODE_WORKER_SERVER_H_
#define STARLING_SERVER_NODE_WORKER_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/node/worker_session.h"

namespace starling {
namespace node {

class WorkerServer {
 public:
  // Listens at `path`. `handler` is borrowed and must outlive the server.
  // Unavailable if another process listens there or binding fails
  // (naming the path and the reason).
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
  WorkerServer(std::string path, int listen_fd, WorkerRequestHandler* handler);
  void AcceptLoop();

  const std::string path_;
  const int listen_fd_;
  WorkerRequestHandler* const handler_;
  std::thread acceptor_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<WorkerSession>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_WORKER_SERVER_H_
