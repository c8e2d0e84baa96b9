#include "client/connection.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/framed_socket.h"
#include "server/base/job_config_checks.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"
#include "server/base/version.h"

namespace starling {
namespace client {
namespace {

// Connects to `path`, retrying while the daemon is not listening yet.
absl::StatusOr<ScopedFd> ConnectUnix(const std::string& path,
                                     absl::Time deadline) {
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
    ScopedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) {
      return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
    }
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
        0) {
      return fd;
    }
    last_error = strerror(errno);
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
                       ScopedFd fd)
    : options_(std::move(options)),
      pool_(std::move(pool)),
      fd_(std::move(fd)) {}

namespace {

// The process at `path` answered in another protocol (`what`).
absl::Status NotStarling(const std::string& path, absl::string_view what) {
  return absl::FailedPreconditionError(absl::StrCat(
      "the process at ", path, " is not a Starling node daemon: ", what,
      "; check the socket path (STARLING_SOCKET, --socket): it names "
      "another program's socket"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(
    const ClientOptions& options_in, std::unique_ptr<SharedPool> pool) {
  ClientOptions options = options_in;
  if (options.worker_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_index must be >= 0, not ", options.worker_index));
  }
  if (options.worker_name.empty()) {
    options.worker_name = absl::StrCat("worker ", options.worker_index);
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  if (pool == nullptr) {
    STARLING_ASSIGN_OR_RETURN(pool, SharedPool::Create(options.pool_bytes));
  }
  proto::WorkerRequest hello;
  hello.set_id(0);
  hello.mutable_hello()->set_worker_name(options.worker_name);
  hello.mutable_hello()->set_worker_index(options.worker_index);
  hello.mutable_hello()->set_pool_bytes(options.pool_bytes);
  hello.mutable_hello()->set_version(kStarlingVersion);
  const std::string where =
      absl::StrCat(options.worker_name, " at ", options.socket_path);
  std::unique_ptr<Connection> connection;
  absl::StatusOr<Frame> frame;
  int socket = -1;
  absl::Duration backoff = absl::Milliseconds(10);
  while (true) {
    STARLING_ASSIGN_OR_RETURN(ScopedFd fd,
                              ConnectUnix(options.socket_path, deadline));
    socket = fd.get();
    connection.reset(new Connection(options, std::move(pool), std::move(fd)));
    absl::Status status =
        WriteFrame(socket, hello.SerializeAsString(), connection->pool_->fd());
    if (status.ok()) {
      // The reader thread is not running yet: read the answer here.
      absl::Duration left = std::max(deadline - absl::Now(), absl::Seconds(1));
      if (options.connect_timeout > absl::ZeroDuration()) {
        left = std::min(left, options.connect_timeout);
      }
      const absl::Duration usec = absl::Trunc(left, absl::Microseconds(1));
      timeval tv = {};
      tv.tv_sec = absl::ToInt64Seconds(usec);
      tv.tv_usec = absl::ToInt64Microseconds(usec - absl::Seconds(tv.tv_sec));
      ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      frame = ReadFrame(socket);
      if (frame.ok()) break;
      if (absl::IsDeadlineExceeded(frame.status())) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no hello reply within ", absl::FormatDuration(left),
            " from the process accepting connections at ", options.socket_path,
            " (", where,
            "): it is not a Starling node daemon, or one that is stopped or "
            "overloaded; check the socket path (STARLING_SOCKET, "
            "--socket) and the daemon's log"));
      }
      if (absl::IsDataLoss(frame.status())) {
        return NotStarling(options.socket_path, frame.status().message());
      }
      status = Annotate(
          frame.status(),
          absl::StrCat("waiting for the daemon's hello reply to ", where));
    } else {
      status = Annotate(status, absl::StrCat("hello from ", where));
    }
    // Closed or reset without an answer: the daemon's process ended with
    // this connection still waiting (one killed as this worker connected;
    // a daemon that refuses a worker says why first). Again, with the
    // daemon started next, until the deadline.
    if (!absl::IsUnavailable(status) || absl::Now() + backoff >= deadline) {
      return status;
    }
    pool = connection->TakePool();
    connection.reset();
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
  timeval tv = {};
  tv.tv_sec = 0;
  ::setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  proto::WorkerResponse response;
  if (!response.ParseFromString(frame->payload) ||
      (response.code() == 0 && !response.has_hello())) {
    return NotStarling(
        options.socket_path,
        absl::StrCat(
            "a ", frame->payload.size(),
            "-byte reply that is not a hello reply, beginning \"",
            absl::CHexEscape(absl::string_view(frame->payload).substr(0, 16)),
            "\""));
  }
  STARLING_RETURN_IF_ERROR(ToStatus(response));
  connection->hello_ = response.hello();
  {
    absl::MutexLock lock(&connection->mu_);
    connection->next_step_ = response.hello().next_step();
    connection->run_id_ = response.hello().run_id();
  }
  connection->where_ =
      absl::StrCat(options.worker_name, " of rank ", connection->hello_.rank(),
                   " (daemon ", connection->hello_.daemon_address(),
                   ", socket ", options.socket_path, ")");
  connection->reader_ = std::thread([c = connection.get()] {
    c->ReadLoop();
    c->reader_done_.Notify();
  });
  connection->writer_ = std::thread([c = connection.get()] { c->WriteLoop(); });
  return connection;
}

std::vector<proto::TensorSpec> Connection::Declarations() const {
  absl::MutexLock lock(&mu_);
  std::vector<proto::TensorSpec> specs = specs_;
  for (proto::TensorSpec& spec : specs) spec.clear_bucket();
  return specs;
}

Connection::~Connection() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  // An orderly close: the daemon reads the end of the stream, lets go of
  // this worker's slot and then closes its end, which ends the reader. So
  // a worker with the same index started right after this one finds its
  // slot free. Bounded: a daemon that has not closed by kCloseWait is cut
  // off. A connection whose hello failed (Open's error paths) has no
  // reader and holds no slot: nothing to wait for.
  ::shutdown(fd_.get(), SHUT_WR);
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) {
    reader_done_.WaitForNotificationWithTimeout(kCloseWait);
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  absl::MutexLock lock(&mu_);
  UnmapParametersLocked();
}

void Connection::Break(const absl::Status& why) {
  std::map<uint64_t, Pending> pending;
  {
    absl::MutexLock lock(&mu_);
    if (broken_.ok()) broken_ = why;
    pending.swap(pending_);
    outgoing_.clear();
  }
  for (auto& entry : pending) {
    entry.second.state->Complete(
        Annotate(why, absl::StrCat(entry.second.what, " (", where_, ")")));
  }
}

std::shared_ptr<internal::FutureState> Connection::Send(
    proto::WorkerRequest request, std::string what) {
  absl::MutexLock lock(&mu_);
  return SendLocked(std::move(request), what);
}

std::shared_ptr<internal::FutureState> Connection::SendLocked(
    proto::WorkerRequest request, const std::string& what) {
  auto state = std::make_shared<internal::FutureState>(
      absl::StrCat(what, " (", where_, ")"));
  if (!broken_.ok()) {
    // Completing runs no callback yet: none can have been added.
    state->Complete(Annotate(broken_, absl::StrCat(what, " (", where_, ")")));
    return state;
  }
  request.set_id(next_id_++);
  pending_[request.id()] = Pending{state, what};
  outgoing_.push_back(request.SerializeAsString());
  return state;
}

void Connection::WriteLoop() {
  while (true) {
    std::string frame;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Connection* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_) {
            return !c->outgoing_.empty() || c->closing_ || !c->broken_.ok();
          },
          this));
      if (closing_ || !broken_.ok()) return;
      frame = std::move(outgoing_.front());
      outgoing_.pop_front();
    }
    absl::Status status = WriteFrame(fd_.get(), frame);
    if (!status.ok()) {
      // The same words whether the write or the reader noticed first.
      Break(absl::UnavailableError(absl::StrCat(
          "connection to the node daemon lost: ", status.message())));
      return;
    }
  }
}

void Connection::ReadLoop() {
  while (true) {
    absl::StatusOr<Frame> frame = ReadFrame(fd_.get());
    proto::WorkerResponse response;
    if (frame.ok() && !response.ParseFromString(frame->payload)) {
      frame = absl::DataLossError("unparsable response from the daemon");
    }
    if (!frame.ok()) {
      Break(absl::UnavailableError(absl::StrCat(
          "connection to the node daemon lost: ", frame.status().message())));
      return;
    }
    if (response.id() == 0 && response.code() != 0) {
      // The daemon refused the connection (it could not read a request).
      Break(absl::Status(static_cast<absl::StatusCode>(response.code()),
                         absl::StrCat("the node daemon closed the connection: ",
                                      response.message())));
      return;
    }
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      // Only a commit reply carries a descriptor: the run's parameters
      // (where the daemon shares them). Kept before the commit's future
      // completes; any other one closes with the frame.
      if (frame->received_fd.valid() && response.has_commit() &&
          response.code() == 0) {
        params_fd_ = std::move(frame->received_fd);
      }
      auto it = pending_.find(response.id());
      if (it == pending_.end()) continue;  // not ours any more: ignore
      p = std::move(it->second);
      pending_.erase(it);
    }
    absl::Status status = ToStatus(response);
    if (!status.ok()) {
      status = Annotate(status, absl::StrCat(p.what, " (", where_, ")"));
    } else if (response.has_pull()) {
      last_pulled_version_.store(response.pull().version(),
                                 std::memory_order_relaxed);
    }
    p.state->Complete(std::move(status), std::move(response));
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
  auto state = Send(std::move(request),
                    absl::StrCat("declare tensor '", spec.name(), "'"));
  STARLING_RETURN_IF_ERROR(state->Wait(absl::Now() + options_.timeout));
  absl::MutexLock lock(&mu_);
  Declared declared;
  declared.offset = declared_elements_;
  declared.elements = elements;
  declared.dtype = spec.dtype();
  declared.index = static_cast<int>(specs_.size());
  declared_[spec.name()] = declared;
  specs_.push_back(spec);
  declared_elements_ += elements;
  return absl::OkStatus();
}

int Connection::buckets() const {
  absl::MutexLock lock(&mu_);
  return buckets_;
}

std::vector<int> Connection::TensorsPerBucket() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> counts(buckets_, 0);
  for (const proto::TensorSpec& spec : specs_) ++counts[spec.bucket()];
  return counts;
}

int Connection::declared_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(specs_.size());
}

absl::Status Connection::SetInitialParameters(
    std::vector<proto::PoolSlice> slices, bool offered) {
  absl::MutexLock lock(&mu_);
  if (commit_ != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "initial parameters are set after the declarations and before the "
        "first push, pull, all-reduce or barrier; this worker's declarations "
        "ended already (",
        where_, ")"));
  }
  initial_ = std::move(slices);
  initial_offered_ = offered;
  return absl::OkStatus();
}

absl::StatusOr<Connection::Declared> Connection::FindDeclared(
    absl::string_view tensor) const {
  absl::MutexLock lock(&mu_);
  auto it = declared_.find(tensor);
  if (it == declared_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "' was not declared (", where_, ")"));
  }
  return it->second;
}

absl::StatusOr<uint64_t> Connection::ElementsOf(
    absl::string_view tensor) const {
  STARLING_ASSIGN_OR_RETURN(const Declared declared, FindDeclared(tensor));
  return declared.elements;
}

absl::Status Connection::EnsureCommitted() {
  std::shared_ptr<internal::FutureState> commit;
  {
    absl::MutexLock lock(&mu_);
    if (commit_ == nullptr) {
      proto::WorkerRequest request;
      // Parameter-server mode applies whole pushes: one bucket.
      const uint64_t bucket_bytes =
          proto::UsesShardOwners(hello_.mode()) ? 0 : options_.bucket_bytes;
      buckets_ = proto::AssignBuckets(bucket_bytes, &specs_);
      for (const proto::TensorSpec& spec : specs_) {
        declared_[spec.name()].bucket = spec.bucket();
      }
      request.mutable_commit_tensors()->set_bucket_bytes(bucket_bytes);
      for (proto::PoolSlice& slice : initial_) {
        *request.mutable_commit_tensors()->add_initial_parameters() =
            std::move(slice);
      }
      request.mutable_commit_tensors()->set_offered(initial_offered_ &&
                                                    !initial_.empty());
      initial_.clear();
      // Send() takes mu_ itself: build the state here instead.
      commit_ = std::make_shared<internal::FutureState>(
          absl::StrCat("end of tensor declarations (", where_, ")"));
      if (broken_.ok()) {
        request.set_id(next_id_++);
        pending_[request.id()] = Pending{commit_, "end of tensor declarations"};
        outgoing_.push_back(request.SerializeAsString());
      } else {
        commit_->Complete(broken_);
      }
    }
    commit = commit_;
  }
  // A timeout leaves the round open on the daemon; sending a second commit
  // would be a different round, so every caller keeps waiting on this one.
  absl::Status status = commit->Wait(absl::Now() + options_.timeout);
  if (status.ok()) {
    const proto::WorkerResponse response = commit->response();
    absl::MutexLock lock(&mu_);
    total_workers_ = response.commit().total_workers();
    run_id_ = response.commit().run_id();
    next_step_ = response.commit().next_step();
    if (params_map_ == nullptr && params_error_.ok()) MapParametersLocked();
  }
  return status;
}

void Connection::MapParametersLocked() {
  if (!params_fd_.valid()) return;
  // Closed on return: the mapping keeps the memory.
  const ScopedFd fd(params_fd_.release());
  const size_t expected =
      SharedParametersFileBytes(declared_elements_ * sizeof(float));
  struct stat st = {};
  if (::fstat(fd.get(), &st) != 0 ||
      static_cast<size_t>(st.st_size) != expected) {
    params_error_ = absl::DataLossError(absl::StrCat(
        "the daemon's parameter memfd holds ", st.st_size, " bytes, not the ",
        expected, " of the ", declared_elements_,
        " declared parameters and the header page (", where_, ")"));
    return;
  }
  void* map = ::mmap(nullptr, expected, PROT_READ, MAP_SHARED, fd.get(), 0);
  const int error = errno;
  if (map == MAP_FAILED) {
    params_error_ = absl::DataLossError(absl::StrCat(
        "mapping the daemon's parameters (", expected,
        " bytes) read-only failed: ", strerror(error), " (", where_, ")"));
    return;
  }
  params_map_ = map;
  params_map_bytes_ = expected;
}

void Connection::UnmapParametersLocked() {
  params_fd_.reset();
  if (params_map_ != nullptr) ::munmap(params_map_, params_map_bytes_);
  params_map_ = nullptr;
  params_map_bytes_ = 0;
  params_error_ = absl::OkStatus();
}

absl::StatusOr<Connection::SharedParameters> Connection::shared_parameters()
    const {
  absl::MutexLock lock(&mu_);
  if (!params_error_.ok()) return params_error_;
  if (params_map_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the daemon shares no parameters with this worker (no run, a "
        "parameter-server run, or an empty model) (",
        where_, ")"));
  }
  SharedParameters shared;
  shared.header = static_cast<const SharedParametersHeader*>(params_map_);
  shared.parameters = reinterpret_cast<const float*>(
      static_cast<const char*>(params_map_) + SharedParametersHeaderBytes());
  shared.elements = declared_elements_;
  return shared;
}

absl::StatusOr<uint64_t> Connection::OffsetOf(absl::string_view tensor) const {
  STARLING_ASSIGN_OR_RETURN(const Declared declared, FindDeclared(tensor));
  return declared.offset;
}

void Connection::ResetRun() {
  absl::MutexLock lock(&mu_);
  UnmapParametersLocked();
  declared_.clear();
  declared_elements_ = 0;
  specs_.clear();
  buckets_ = 0;
  initial_.clear();
  commit_ = nullptr;
  run_id_ = 0;
  next_step_ = 0;
}

int Connection::total_workers() const {
  absl::MutexLock lock(&mu_);
  return total_workers_;
}

uint64_t Connection::run_id() const {
  absl::MutexLock lock(&mu_);
  return run_id_;
}

int64_t Connection::next_step() const {
  absl::MutexLock lock(&mu_);
  return next_step_;
}

void Connection::set_next_step(int64_t step) {
  absl::MutexLock lock(&mu_);
  next_step_ = step;
}

}  // namespace client
}  // namespace starling
