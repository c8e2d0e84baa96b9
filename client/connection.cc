#include "client/connection.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/framed_socket.h"
#include "server/base/status_macros.h"

namespace starling {
namespace client {
namespace {

constexpr char kVersion[] = "0.1.0";

// Connects to `path`, retrying while the daemon is not listening yet.
absl::StatusOr<int> ConnectUnix(const std::string& path, absl::Time deadline) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path '", path, "' is empty or longer than ",
                     sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  std::string last_error;
  absl::Duration backoff = absl::Milliseconds(10);
  while (true) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      return fd;
    }
    last_error = strerror(errno);
    ::close(fd);
    if (absl::Now() + backoff > deadline) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
  return absl::UnavailableError(
      absl::StrCat("could not reach the node daemon at ", path,
                   " within the timeout (last error: ", last_error, ")"));
}

absl::Status ToStatus(const proto::WorkerResponse& response) {
  if (response.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(response.code()),
                      response.message());
}

}  // namespace

Connection::Connection(ClientOptions options, std::unique_ptr<SharedPool> pool,
                       int fd)
    : options_(std::move(options)), pool_(std::move(pool)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const ClientOptions& options_in) {
  ClientOptions options = options_in;
  if (options.worker_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_index must be >= 0, not ", options.worker_index));
  }
  if (options.worker_name.empty()) {
    options.worker_name = absl::StrCat("worker ", options.worker_index);
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<SharedPool> pool,
                            SharedPool::Create(options.pool_bytes));
  STARLING_ASSIGN_OR_RETURN(int fd, ConnectUnix(options.socket_path, deadline));
  std::unique_ptr<Connection> connection(
      new Connection(options, std::move(pool), fd));

  proto::WorkerRequest hello;
  hello.set_id(0);
  hello.mutable_hello()->set_worker_name(options.worker_name);
  hello.mutable_hello()->set_worker_index(options.worker_index);
  hello.mutable_hello()->set_pool_bytes(options.pool_bytes);
  hello.mutable_hello()->set_version(kVersion);
  const std::string where =
      absl::StrCat(options.worker_name, " at ", options.socket_path);
  absl::Status status =
      WriteFrame(fd, hello.SerializeAsString(), connection->pool_->fd());
  if (!status.ok()) return Annotate(status, absl::StrCat("hello from ", where));
  // The reader thread is not running yet: read the answer here.
  timeval tv = {};
  const absl::Duration left =
      std::max(deadline - absl::Now(), absl::Seconds(1));
  tv.tv_sec = absl::ToInt64Seconds(left);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  absl::StatusOr<Frame> frame = ReadFrame(fd);
  if (!frame.ok()) {
    return Annotate(
        frame.status(),
        absl::StrCat("waiting for the daemon's hello reply to ", where));
  }
  tv.tv_sec = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  proto::WorkerResponse response;
  if (!response.ParseFromString(frame->payload)) {
    return absl::DataLossError(absl::StrCat(
        "unparsable hello reply from the daemon at ", options.socket_path));
  }
  STARLING_RETURN_IF_ERROR(ToStatus(response));
  connection->hello_ = response.hello();
  connection->where_ =
      absl::StrCat(options.worker_name, " of rank ", connection->hello_.rank(),
                   " (daemon ", connection->hello_.daemon_address(),
                   ", socket ", options.socket_path, ")");
  connection->reader_ = std::thread([c = connection.get()] { c->ReadLoop(); });
  return connection;
}

Connection::~Connection() {
  ::shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

std::shared_ptr<internal::FutureState> Connection::Send(
    proto::WorkerRequest request, std::string what,
    proto::WorkerResponse* reply) {
  auto state = std::make_shared<internal::FutureState>(
      absl::StrCat(what, " (", where_, ")"));
  absl::Status broken;
  {
    absl::MutexLock lock(&mu_);
    broken = broken_;
    if (broken.ok()) {
      request.set_id(next_id_++);
      pending_[request.id()] = Pending{state, what, reply};
    }
  }
  if (!broken.ok()) {
    state->Complete(Annotate(broken, absl::StrCat(what, " (", where_, ")")));
    return state;
  }
  absl::Status status;
  {
    absl::MutexLock lock(&write_mu_);
    status = WriteFrame(fd_, request.SerializeAsString());
  }
  if (!status.ok()) {
    // The same words whether the write or the reader noticed first.
    const absl::Status lost = absl::UnavailableError(
        absl::StrCat("connection to the node daemon lost: ", status.message()));
    {
      absl::MutexLock lock(&mu_);
      pending_.erase(request.id());
      if (broken_.ok()) broken_ = lost;
    }
    state->Complete(Annotate(lost, absl::StrCat(what, " (", where_, ")")));
  }
  return state;
}

void Connection::ReadLoop() {
  while (true) {
    absl::StatusOr<Frame> frame = ReadFrame(fd_);
    proto::WorkerResponse response;
    if (frame.ok() && !response.ParseFromString(frame->payload)) {
      frame = absl::DataLossError("unparsable response from the daemon");
    }
    if (!frame.ok()) {
      std::map<uint64_t, Pending> pending;
      const absl::Status broken = absl::UnavailableError(absl::StrCat(
          "connection to the node daemon lost: ", frame.status().message()));
      {
        absl::MutexLock lock(&mu_);
        broken_ = broken;
        pending.swap(pending_);
      }
      for (auto& entry : pending) {
        entry.second.state->Complete(Annotate(
            broken, absl::StrCat(entry.second.what, " (", where_, ")")));
      }
      return;
    }
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      auto it = pending_.find(response.id());
      if (it == pending_.end()) continue;  // not ours any more: ignore
      p = std::move(it->second);
      pending_.erase(it);
    }
    if (p.reply != nullptr) *p.reply = response;
    absl::Status status = ToStatus(response);
    if (!status.ok()) {
      status = Annotate(status, absl::StrCat(p.what, " (", where_, ")"));
    }
    p.state->Complete(std::move(status));
  }
}

absl::Status Connection::Declare(const proto::TensorSpec& spec) {
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': dimension ", d,
                       " is negative (", where_, ")"));
    }
    elements *= static_cast<uint64_t>(d);
  }
  proto::WorkerRequest request;
  *request.mutable_declare_tensor()->mutable_spec() = spec;
  auto state =
      Send(std::move(request),
           absl::StrCat("declare tensor '", spec.name(), "'"), nullptr);
  STARLING_RETURN_IF_ERROR(state->Wait(absl::Now() + options_.timeout));
  absl::MutexLock lock(&mu_);
  declared_[spec.name()] = elements;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Connection::ElementsOf(
    absl::string_view tensor) const {
  absl::MutexLock lock(&mu_);
  auto it = declared_.find(std::string(tensor));
  if (it == declared_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "' was not declared (", where_, ")"));
  }
  return it->second;
}

absl::Status Connection::EnsureCommitted() {
  absl::MutexLock lock(&commit_mu_);
  if (committed_) return commit_status_;
  proto::WorkerRequest request;
  request.mutable_commit_tensors();
  proto::WorkerResponse reply;
  auto state = Send(std::move(request), "end of tensor declarations", &reply);
  commit_status_ = state->Wait(absl::Now() + options_.timeout);
  // A timeout leaves the round open on the daemon; retrying would send a
  // second commit, so the timeout sticks.
  committed_ = true;
  if (commit_status_.ok()) total_workers_ = reply.commit().total_workers();
  return commit_status_;
}

int Connection::total_workers() const {
  absl::MutexLock lock(&commit_mu_);
  return total_workers_;
}

}  // namespace client
}  // namespace starling
