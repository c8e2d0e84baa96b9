#include "server/node/worker/worker_session.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/framed_socket.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/node/worker/worker_request_check.h"

namespace starling {
namespace node {
namespace {

// A worker that does not take a reply off its socket within this long is
// treated as gone (its writer gives up; the session closes).
constexpr int kSendTimeoutSeconds = 10;

pid_t PeerPid(int fd) {
  ucred cred = {};
  socklen_t length = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return 0;
  }
  return cred.pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Map(ScopedFd fd,
                                                            size_t bytes) {
  // Seals exist only on memfds; F_GET_SEALS fails (EINVAL) on anything
  // else, which is refused the same way.
  const int seals = ::fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(
        "the shared-memory pool is not a memfd sealed against shrinking "
        "(F_SEAL_SHRINK); a worker could truncate it under the daemon. Use "
        "the Starling client library, which seals its pool");
  }
  struct stat st = {};
  if (::fstat(fd.get(), &st) != 0 || static_cast<size_t>(st.st_size) < bytes ||
      bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pool descriptor holds ", st.st_size,
                     " bytes, not the announced ", bytes));
  }
  void* base =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    return absl::InternalError(absl::StrCat("mapping a worker pool of ", bytes,
                                            " bytes: ", strerror(e)));
  }
  return std::unique_ptr<WorkerPool>(
      new WorkerPool(std::move(fd), static_cast<std::byte*>(base), bytes));
}

WorkerPool::~WorkerPool() { ::munmap(base_, size_); }

absl::StatusOr<absl::Span<float>> WorkerPool::Floats(
    const proto::PoolSlice& slice) const {
  STARLING_ASSIGN_OR_RETURN(absl::Span<std::byte> bytes,
                            Bytes(slice, sizeof(float)));
  return absl::Span<float>(reinterpret_cast<float*>(bytes.data()),
                           slice.elements());
}

absl::StatusOr<absl::Span<std::byte>> WorkerPool::Bytes(
    const proto::PoolSlice& slice, size_t element_bytes) const {
  const uint64_t offset = slice.offset_bytes();
  const uint64_t elements = slice.elements();
  if (element_bytes == 0 || offset % element_bytes != 0 || offset > size_ ||
      elements > (size_ - offset) / element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer of tensor '", slice.tensor(), "' (", elements, " elements of ",
        element_bytes, " bytes at pool offset ", offset,
        ") is misaligned or leaves the ", size_, "-byte pool"));
  }
  return absl::Span<std::byte>(base_ + offset, elements * element_bytes);
}

void Responder::Reply(uint64_t id, const absl::Status& status,
                      proto::WorkerResponse response, ScopedFd pass_fd) {
  response.set_id(id);
  response.set_code(static_cast<int>(status.code()));
  response.set_message(std::string(status.message()));
  std::string frame = response.SerializeAsString();
  absl::MutexLock lock(&mu_);
  if (closed_ || queued_bytes_ + frame.size() > kMaxQueuedReplyBytes) {
    if (closed_) return;  // the worker is gone (`pass_fd` closes)
    // The worker does not read: stop here; the writer closes the socket.
    overflowed_ = true;
    closed_ = true;
    return;
  }
  queued_bytes_ += frame.size();
  queue_.push_back(Queued{std::move(frame), std::move(pass_fd)});
}

bool Responder::Next(std::string* frame, ScopedFd* pass_fd) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Responder* r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) {
        return !r->queue_.empty() || r->closed_;
      },
      this));
  if (queue_.empty() || overflowed_) return false;
  *frame = std::move(queue_.front().frame);
  *pass_fd = std::move(queue_.front().pass_fd);
  queue_.pop_front();
  queued_bytes_ -= frame->size();
  return true;
}

void Responder::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool Responder::overflowed() const {
  absl::MutexLock lock(&mu_);
  return overflowed_;
}

WorkerSession::WorkerSession(ScopedFd fd, uint64_t session,
                             WorkerRequestHandler* handler)
    : fd_(std::move(fd)),
      session_(session),
      handler_(handler),
      responder_(std::make_shared<Responder>()) {
  timeval tv = {};
  tv.tv_sec = kSendTimeoutSeconds;
  ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  writer_ = std::thread([this] { WriteLoop(); });
  reader_ = std::thread([this] { ReadLoop(); });
}

WorkerSession::~WorkerSession() {
  responder_->Close();
  ::shutdown(fd_.get(), SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (writer_.joinable()) writer_.join();
  // Only now (fd_'s destructor): no thread of this session can touch the
  // descriptor any more.
}

void WorkerSession::WriteLoop() {
  std::string frame;
  ScopedFd pass_fd;
  while (responder_->Next(&frame, &pass_fd)) {
    absl::Status status = WriteFrame(fd_.get(), frame, pass_fd.get());
    pass_fd.reset();  // the worker holds its own copy
    if (!status.ok()) {
      STARLING_LOG(DEBUG) << "reply to a worker not sent: " << status;
      break;
    }
  }
  if (responder_->overflowed()) {
    STARLING_LOG(WARNING) << "a worker did not read its replies ("
                          << kMaxQueuedReplyBytes
                          << " bytes queued); closing its connection";
  }
  // Ends the reader too, so that the daemon learns the worker is gone.
  responder_->Close();
  ::shutdown(fd_.get(), SHUT_RDWR);
}

absl::StatusOr<WorkerHandle> WorkerSession::Hello(
    const proto::WorkerRequest& request, ScopedFd received_fd) {
  if (request.kind_case() != proto::WorkerRequest::kHello) {
    return absl::FailedPreconditionError(
        "the first message of a worker must be hello");
  }
  if (!received_fd.valid()) {
    return absl::InvalidArgumentError(
        "hello carried no shared-memory pool descriptor");
  }
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool =
      WorkerPool::Map(std::move(received_fd), request.hello().pool_bytes());
  if (!pool.ok()) return pool.status();
  WorkerHandle handle;
  handle.session = session_;
  handle.index = request.hello().worker_index();
  handle.name = request.hello().worker_name();
  handle.pid = PeerPid(fd_.get());
  handle.pool = std::move(*pool);
  handle.responder = responder_;
  absl::StatusOr<proto::HelloReply> reply =
      handler_->Attach(handle, request.hello());
  if (!reply.ok()) return reply.status();
  proto::WorkerResponse response;
  *response.mutable_hello() = *reply;
  responder_->Reply(request.id(), absl::OkStatus(), std::move(response));
  return handle;
}

void WorkerSession::ReadLoop() {
  std::optional<WorkerHandle> handle;
  while (true) {
    absl::StatusOr<Frame> frame = ReadFrame(fd_.get());
    if (!frame.ok()) {
      STARLING_LOG(DEBUG) << "worker connection ended: " << frame.status();
      break;
    }
    absl::StatusOr<proto::WorkerRequest> request =
        DecodeWorkerRequest(frame->payload);
    if (request.ok() && handle.has_value()) {
      // A request that decodes but holds a value out of bounds is answered
      // with the error; the session lives on (only a broken protocol, or a
      // bad hello, closes it).
      if (absl::Status checked = CheckWorkerRequest(*request); !checked.ok()) {
        STARLING_LOG(WARNING)
            << "refused a request of worker '" << handle->name << "' (index "
            << handle->index << "): " << checked;
        frame->received_fd.reset();
        responder_->Reply(request->id(), checked);
        continue;
      }
    } else if (request.ok()) {
      if (absl::Status checked = CheckWorkerRequest(*request); !checked.ok()) {
        request = checked;
      }
    }
    if (!request.ok()) {
      STARLING_LOG(WARNING)
          << "closing the connection of "
          << (handle.has_value() ? absl::StrCat("worker '", handle->name,
                                                "' (index ", handle->index, ")")
                                 : std::string("a worker"))
          << ": " << request.status();
      // Id 0: the request's own id may be garbage.
      responder_->Reply(0, request.status());
      break;
    }
    if (!handle.has_value()) {
      absl::StatusOr<WorkerHandle> attached =
          Hello(*request, std::move(frame->received_fd));
      if (!attached.ok()) {
        STARLING_LOG(WARNING) << "refused a worker: " << attached.status();
        responder_->Reply(request->id(), attached.status());
        break;
      }
      handle = std::move(*attached);
      continue;
    }
    frame->received_fd.reset();  // only hello carries one
    if (request->kind_case() == proto::WorkerRequest::kHello) {
      responder_->Reply(request->id(),
                        absl::FailedPreconditionError("hello sent twice"));
      continue;
    }
    handler_->Handle(*handle, *request);
  }
  if (handle.has_value()) handler_->Detach(*handle);
  // Lets the writer send what is queued (a refusal), then end.
  responder_->Close();
  // release: publishes that the reader is done (see finished()).
  finished_.store(true, std::memory_order_release);
}

}  // namespace node
}  // namespace starling
