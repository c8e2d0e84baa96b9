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
#include "server/base/status_macros.h"

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

// One daemon per path: the lock on `path`.lock, held for the server's life
// and released by the kernel if the daemon dies.
absl::StatusOr<ScopedFd> LockSocketPath(const std::string& path) {
  const std::string lock_path = path + ".lock";
  ScopedFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock.valid()) {
    return absl::UnavailableError(
        absl::StrCat("cannot open the worker socket's lock file ", lock_path,
                     ": ", strerror(errno), " (--worker_socket)"));
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::AlreadyExistsError(absl::StrCat(
        "worker socket ", path, " belongs to another starling-node (its lock ",
        lock_path, " is held: ", strerror(errno),
        "); give each daemon its own --worker_socket"));
  }
  return lock;
}

// A socket file left at `path` by a dead daemon refuses connections: it is
// removed. One that accepts belongs to a live process, and anything else
// is not ours: refused.
absl::Status RemoveStaleSocket(const std::string& path,
                               const sockaddr_un& addr) {
  struct stat st = {};
  if (::lstat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker socket path ", path, " exists and is ", FileKind(st.st_mode),
        "; refusing to replace it (--worker_socket)"));
  }
  const ScopedFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  const bool live =
      ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr),
                sizeof(addr)) == 0;
  const int e = errno;
  if (live) {
    return absl::AlreadyExistsError(
        absl::StrCat("worker socket ", path,
                     " is in use: another process accepts connections "
                     "there (--worker_socket)"));
  }
  if (e != ECONNREFUSED) {
    return absl::UnavailableError(absl::StrCat(
        "worker socket ", path, " exists and cannot be probed: ", strerror(e)));
  }
  ::unlink(path.c_str());
  return absl::OkStatus();
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
  STARLING_ASSIGN_OR_RETURN(ScopedFd lock, LockSocketPath(path));
  STARLING_RETURN_IF_ERROR(RemoveStaleSocket(path, addr));
  ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on worker socket ", path, ": ", strerror(errno)));
  }
  return std::unique_ptr<WorkerServer>(
      new WorkerServer(path, std::move(fd), std::move(lock)));
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const std::string& path, WorkerRequestHandler* handler) {
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = Listen(path);
  if (server.ok()) (*server)->Serve(handler);
  return server;
}

WorkerServer::WorkerServer(std::string path, ScopedFd listen_fd,
                           ScopedFd lock_fd)
    : path_(std::move(path)),
      listen_fd_(std::move(listen_fd)),
      lock_fd_(std::move(lock_fd)) {}

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
  ::shutdown(listen_fd_.get(), SHUT_RDWR);
  if (acceptor.joinable()) acceptor.join();
  listen_fd_.reset();
  ::unlink(path_.c_str());
  sessions.clear();  // each destructor closes its socket and joins
  lock_fd_.reset();  // releases the lock
}

void WorkerServer::AcceptLoop(WorkerRequestHandler* handler) {
  while (true) {
    ScopedFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
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
      if (stopped_) return;
      // Reap sessions whose worker left (joined outside the lock below).
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        if ((*it)->finished()) {
          finished.push_back(std::move(*it));
          it = sessions_.erase(it);
        } else {
          ++it;
        }
      }
      sessions_.push_back(std::make_unique<WorkerSession>(
          std::move(fd), next_session_++, handler));
    }
    finished.clear();
  }
}

}  // namespace node
}  // namespace starling
