#include "client/python/starling_work.h"

#include <ATen/Parallel.h>

#include <exception>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace torch_backend {
namespace {

// The devices other than the CPU that `tensors` live on: the Future must
// know them (CUDA tensors are staged through host memory and written back
// before the work completes).
std::vector<c10::Device> DevicesOf(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : tensors) {
    if (t.device().is_cpu()) continue;
    bool seen = false;
    for (const c10::Device& d : devices) seen = seen || d == t.device();
    if (!seen) devices.push_back(t.device());
  }
  return devices;
}

}  // namespace

StarlingWork::StarlingWork(int rank, c10d::OpType type, std::string description,
                           std::vector<at::Tensor> outputs,
                           std::chrono::milliseconds default_timeout)
    : c10d::Work(rank, type),
      description_(std::move(description)),
      outputs_(std::move(outputs)),
      default_timeout_(default_timeout),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), DevicesOf(outputs_))) {
}

bool StarlingWork::wait(std::chrono::milliseconds timeout) {
  const std::chrono::milliseconds bound =
      timeout == kNoTimeout ? default_timeout_ : timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  if (!cv_.wait_for(lock, bound, [this] { return completed_; })) {
    throw std::runtime_error(absl::StrCat(
        "starling ", description_, ": not done after waiting ", bound.count(),
        " ms (Work.wait timeout",
        timeout == kNoTimeout ? ": the process group's timeout" : "",
        "); the op goes on"));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> StarlingWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> StarlingWork::getFuture() {
  return future_;
}

void StarlingWork::Complete(const absl::Status& status) {
  std::exception_ptr error;
  if (!status.ok()) {
    error = std::make_exception_ptr(std::runtime_error(
        absl::StrCat("starling ", description_, " failed: ", status.message(),
                     " (", absl::StatusCodeToString(status.code()), ")")));
  }
  // Held by the task until it ran.
  c10::intrusive_ptr<StarlingWork> self =
      c10::intrusive_ptr<StarlingWork>::reclaim_copy(this);
  at::launch([self, error] {
    if (error) {
      self->future_->setError(error);
    } else {
      self->future_->markCompleted(c10::IValue(self->outputs_));
    }
    // After the future: a caller whose wait() returned may read it.
    self->finish(error);
  });
}

}  // namespace torch_backend
}  // namespace starling
