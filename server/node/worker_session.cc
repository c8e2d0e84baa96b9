#include "server/node/worker_session.h"

#include <errno.h>
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

namespace starling {
namespace node {

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Map(int fd,
                                                            size_t bytes) {
  struct stat st = {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes ||
      bytes == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("the pool descriptor holds ", st.st_size,
                     " bytes, not the announced ", bytes));
  }
  void* base =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("mapping a worker pool of ", bytes,
                                            " bytes: ", strerror(e)));
  }
  return std::unique_ptr<WorkerPool>(
      new WorkerPool(fd, static_cast<std::byte*>(base), bytes));
}

WorkerPool::~WorkerPool() {
  ::munmap(base_, size_);
  ::close(fd_);
}

absl::StatusOr<absl::Span<float>> WorkerPool::Floats(
    const proto::PoolSlice& slice) const {
  const uint64_t offset = slice.offset_bytes();
  const uint64_t elements = slice.elements();
  if (offset % alignof(float) != 0 || offset > size_ ||
      elements > (size_ - offset) / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer of tensor '", slice.tensor(), "' (", elements,
                     " floats at pool offset ", offset,
                     ") is misaligned or leaves the ", size_, "-byte pool"));
  }
  return absl::Span<float>(reinterpret_cast<float*>(base_ + offset), elements);
}

void Responder::Reply(uint64_t id, const absl::Status& status,
                      proto::WorkerResponse response) {
  response.set_id(id);
  response.set_code(static_cast<int>(status.code()));
  response.set_message(std::string(status.message()));
  absl::MutexLock lock(&mu_);
  // Dropped on failure: the worker went away and its reader thread ends.
  WriteFrame(fd_, response.SerializeAsString()).IgnoreError();
}

WorkerSession::WorkerSession(int fd, WorkerRequestHandler* handler)
    : fd_(fd), handler_(handler), responder_(std::make_shared<Responder>(fd)) {
  reader_ = std::thread([this] { ReadLoop(); });
}

WorkerSession::~WorkerSession() {
  ::shutdown(fd_, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

absl::StatusOr<WorkerHandle> WorkerSession::Hello(
    const proto::WorkerRequest& request, int received_fd) {
  if (request.kind_case() != proto::WorkerRequest::kHello) {
    if (received_fd >= 0) ::close(received_fd);
    return absl::FailedPreconditionError(
        "the first message of a worker must be hello");
  }
  if (received_fd < 0) {
    return absl::InvalidArgumentError(
        "hello carried no shared-memory pool descriptor");
  }
  absl::StatusOr<std::unique_ptr<WorkerPool>> pool =
      WorkerPool::Map(received_fd, request.hello().pool_bytes());
  if (!pool.ok()) return pool.status();
  absl::StatusOr<proto::HelloReply> reply = handler_->Attach(request.hello());
  if (!reply.ok()) return reply.status();
  WorkerHandle handle;
  handle.index = request.hello().worker_index();
  handle.name = request.hello().worker_name();
  handle.pool = std::move(*pool);
  handle.responder = responder_;
  proto::WorkerResponse response;
  *response.mutable_hello() = *reply;
  responder_->Reply(request.id(), absl::OkStatus(), std::move(response));
  return handle;
}

void WorkerSession::ReadLoop() {
  std::optional<WorkerHandle> handle;
  while (true) {
    absl::StatusOr<Frame> frame = ReadFrame(fd_);
    if (!frame.ok()) {
      STARLING_LOG(DEBUG) << "worker connection ended: " << frame.status();
      break;
    }
    proto::WorkerRequest request;
    if (!request.ParseFromString(frame->payload)) {
      if (frame->received_fd >= 0) ::close(frame->received_fd);
      responder_->Reply(0, absl::DataLossError("unparsable worker request"));
      break;
    }
    if (!handle.has_value()) {
      absl::StatusOr<WorkerHandle> attached =
          Hello(request, frame->received_fd);
      if (!attached.ok()) {
        STARLING_LOG(WARNING) << "refused a worker: " << attached.status();
        responder_->Reply(request.id(), attached.status());
        break;
      }
      handle = std::move(*attached);
      continue;
    }
    if (frame->received_fd >= 0) ::close(frame->received_fd);
    handler_->Handle(*handle, request);
  }
  if (handle.has_value()) handler_->Detach(handle->index);
  // release: publishes that the reader is done (see finished()).
  finished_.store(true, std::memory_order_release);
}

}  // namespace node
}  // namespace starling
