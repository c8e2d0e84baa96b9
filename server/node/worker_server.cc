#include "server/node/worker_server.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace node {

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const std::string& path, WorkerRequestHandler* handler) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker socket path '", path, "' is empty or longer than ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  // A socket file left by a dead daemon refuses connections: replace it.
  // One that accepts belongs to a live daemon: refuse to steal it.
  {
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      const bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr),
                                  sizeof(addr)) == 0;
      ::close(probe);
      if (live) {
        return absl::UnavailableError(absl::StrCat(
            "worker socket ", path, " is in use by another daemon"));
      }
    }
    ::unlink(path.c_str());
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on worker socket ", path, ": ", strerror(e)));
  }
  std::unique_ptr<WorkerServer> server(new WorkerServer(path, fd, handler));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

WorkerServer::WorkerServer(std::string path, int listen_fd,
                           WorkerRequestHandler* handler)
    : path_(std::move(path)), listen_fd_(listen_fd), handler_(handler) {}

WorkerServer::~WorkerServer() { Stop(); }

void WorkerServer::Stop() {
  std::vector<std::unique_ptr<WorkerSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    sessions.swap(sessions_);
  }
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  ::unlink(path_.c_str());
  sessions.clear();  // each destructor closes its socket and joins
}

void WorkerServer::AcceptLoop() {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      absl::MutexLock lock(&mu_);
      if (!stopped_) {
        STARLING_LOG(ERROR)
            << "accept on worker socket " << path_ << ": " << strerror(errno);
      }
      return;
    }
    std::vector<std::unique_ptr<WorkerSession>> finished;
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) {
        ::close(fd);
        return;
      }
      // Reap sessions whose worker left (joined outside the lock below).
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if ((*it)->finished()) {
          finished.push_back(std::move(*it));
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
      sessions_.push_back(std::make_unique<WorkerSession>(fd, handler_));
    }
    finished.clear();
  }
}

}  // namespace node
}  // namespace starling
