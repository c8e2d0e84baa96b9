// The torch.distributed Work (c10d::Work) of one op of the starling
// backend: what `dist.all_reduce(t, async_op=True)` returns and DDP's
// reducer waits on.
//
// The collective executor completes it (Complete) once the op ended; its
// Future (getFuture) then holds the op's output tensors, or the error, and
// the future's callbacks (a DDP communication hook's `then`) run on
// PyTorch's inter-op thread pool (at::launch), never on the executor's
// thread, so that a callback may start and wait for another collective.
//
// wait(timeout) raises std::runtime_error (RuntimeError in Python) naming
// the op when it failed, with the daemon's text, or when it did not end in
// time (the op goes on); without a timeout it waits as long as the process
// group's timeout (init_process_group(timeout=...)).
//
// Thread-safe.
#ifndef STARLING_CLIENT_PYTHON_STARLING_WORK_H_
#define STARLING_CLIENT_PYTHON_STARLING_WORK_H_

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/status/status.h"

namespace starling {
namespace torch_backend {

class StarlingWork : public c10d::Work {
 public:
  // `description` names the op in messages ("allreduce (op 12, [1024]
  // torch.float32)"); `outputs` are what result() and the future hold.
  StarlingWork(int rank, c10d::OpType type, std::string description,
               std::vector<at::Tensor> outputs,
               std::chrono::milliseconds default_timeout);

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Ends the work with the op's status; called once.
  void Complete(const absl::Status& status);

  const std::string& description() const { return description_; }

 private:
  const std::string description_;
  const std::vector<at::Tensor> outputs_;
  const std::chrono::milliseconds default_timeout_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_STARLING_WORK_H_
