#include "server/node/worker/worker_server.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace node {
namespace {

// "a regular file", "a directory", ... for the refusal message.
const char* FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  return "not a socket";
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Listen(
    const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker socket path '", path, "' is empty or longer than ",
                     sizeof(addr.sun_path) - 1, " bytes (--worker_socket)"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  // One daemon per path: the lock is held for the server's life and
  // released by the kernel if the daemon dies.
  const std::string lock_path = path + ".lock";
  const int lock_fd =
      ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the worker socket's lock file ", lock_path,
                     ": ", strerror(errno), " (--worker_socket)"));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(lock_fd);
    return absl::AlreadyExistsError(absl::StrCat(
        "worker socket ", path, " belongs to another starling-node (its lock ",
        lock_path, " is held: ", strerror(e),
        "); give each daemon its own --worker_socket"));
  }
  auto fail = [lock_fd](absl::Status status) {
    ::close(lock_fd);
    return status;
  };
  struct stat st = {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "worker socket path ", path, " exists and is ", FileKind(st.st_mode),
          "; refusing to replace it (--worker_socket)")));
    }
    // A socket file left by a dead daemon refuses connections: replace it.
    // One that accepts belongs to a live process: refuse to steal it.
    const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) {
      return fail(
          absl::InternalError(absl::StrCat("socket: ", strerror(errno))));
    }
    const bool live =
        ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    const int e = errno;
    ::close(probe);
    if (live) {
      return fail(absl::AlreadyExistsError(
          absl::StrCat("worker socket ", path,
                       " is in use: another process accepts connections "
                       "there (--worker_socket)")));
    }
    if (e != ECONNREFUSED) {
      return fail(absl::UnavailableError(
          absl::StrCat("worker socket ", path,
                       " exists and cannot be probed: ", strerror(e))));
    }
    ::unlink(path.c_str());
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return fail(absl::InternalError(absl::StrCat("socket: ", strerror(errno))));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return fail(absl::UnavailableError(absl::StrCat(
        "cannot listen on worker socket ", path, ": ", strerror(e))));
  }
  return std::unique_ptr<WorkerServer>(new WorkerServer(path, fd, lock_fd));
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const std::string& path, WorkerRequestHandler* handler) {
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = Listen(path);
  if (server.ok()) (*server)->Serve(handler);
  return server;
}

WorkerServer::WorkerServer(std::string path, int listen_fd, int lock_fd)
    : path_(std::move(path)), listen_fd_(listen_fd), lock_fd_(lock_fd) {}

WorkerServer::~WorkerServer() { Stop(); }

void WorkerServer::Serve(WorkerRequestHandler* handler) {
  absl::MutexLock lock(&mu_);
  if (stopped_ || acceptor_.joinable()) return;
  acceptor_ = std::thread([this, handler] { AcceptLoop(handler); });
}

void WorkerServer::Stop() {
  std::vector<std::unique_ptr<WorkerSession>> sessions;
  std::thread acceptor;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    sessions.swap(sessions_);
    acceptor.swap(acceptor_);
  }
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor.joinable()) acceptor.join();
  ::close(listen_fd_);
  ::unlink(path_.c_str());
  sessions.clear();   // each destructor closes its socket and joins
  ::close(lock_fd_);  // releases the lock
}

void WorkerServer::AcceptLoop(WorkerRequestHandler* handler) {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      const int e = errno;
      absl::MutexLock lock(&mu_);
      if (!stopped_) {
        STARLING_LOG(ERROR)
            << "accept on worker socket " << path_ << ": " << strerror(e);
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
      sessions_.push_back(
          std::make_unique<WorkerSession>(fd, next_session_++, handler));
    }
    finished.clear();
  }
}

}  // namespace node
}  // namespace starling
