// ProcessGroupStarling: torch.distributed's "starling" backend, a
// c10d::ProcessGroup whose collectives run on the node daemons through the
// worker's client (collective_api.h), one op at a time on the process's
// CollectiveExecutor. starling/torch/distributed.py registers it.
//
// Ranks and slots: the daemons number workers by slot (daemon rank x local
// workers + worker index); torch numbers them by rank, which a launcher
// (torchrun) may assign otherwise. Create() learns every rank's slot, and
// results ordered "by rank" (all_gather's list, gather, alltoall) are in
// torch's rank order.
//
// What each op costs on the daemons (N workers, b bytes per worker):
// - allreduce, allreduce_coalesced, reduce: one all-reduce of b (reduce
//   is an all-reduce whose result only the root keeps);
// - broadcast: one broadcast of b; scatter: one broadcast of N x b (the
//   root's list; each keeps its piece);
// - allgather, _allgather_base, allgather_coalesced, gather: one
//   all-gather of N x b (gather: every worker receives what the root
//   keeps);
// - reduce_scatter, _reduce_scatter_base: one reduce-scatter of N x b;
// - alltoall_base, alltoall: an all-gather of every worker's whole input
//   (N x the bytes a point-to-point exchange would move), preceded by an
//   all-gather of the split sizes when they are uneven (alltoall always);
// - barrier: the client's barrier.
// Collectives only: send, recv and recvAnysource throw, naming the op.
//
// Errors: argument errors throw std::runtime_error at the call, naming the
// op (PyTorch's convention: a RuntimeError in Python); a failure of the op
// itself (the daemons' text: mismatched shapes fail on every worker) sets
// the Work's error, raised by wait() and by its future.
//
// Thread-safe; ops reach the daemons in the order they were called.
#ifndef STARLING_CLIENT_PYTHON_PROCESS_GROUP_STARLING_H_
#define STARLING_CLIENT_PYTHON_PROCESS_GROUP_STARLING_H_

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "absl/status/status.h"
#include "client/python/collective_executor.h"

namespace starling {
namespace torch_backend {

class ProcessGroupStarling : public c10d::ProcessGroup {
 public:
  // Creates the group of `size` processes in which this one is `rank`:
  // a barrier (which begins a Starling run if none is under way), a check
  // that `size` is the job's number of workers, then an all-gather of
  // every worker's rank (they must be a permutation of 0 .. size - 1).
  // Every worker gets the same error. Blocks; throws std::runtime_error.
  // `timeout`: how long Work::wait() waits when not told.
  static c10::intrusive_ptr<ProcessGroupStarling> Create(
      std::shared_ptr<CollectiveExecutor> executor, int rank, int size,
      std::chrono::milliseconds timeout);

  // Use Create().
  ProcessGroupStarling(std::shared_ptr<CollectiveExecutor> executor, int rank,
                       int size, std::chrono::milliseconds timeout,
                       std::vector<int> slot_of_rank);
  ~ProcessGroupStarling() override;

  const std::string getBackendName() const override { return "starling"; }

  // The Starling slot of each torch rank.
  const std::vector<int>& slot_of_rank() const { return slot_of_rank_; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

 private:
  using Body = std::function<absl::Status(CollectiveExecutor::Context&)>;

  // Queues `body` on the executor; the Work (named `what`, holding
  // `outputs`) completes when it returned. `timeout` is the op's own
  // (kUnsetTimeout: the group's). `touched`: every tensor the body reads
  // or writes, when the body launches its collective (the executor runs it
  // beside the ops in flight only if their storages differ); empty: the
  // ops in flight end first.
  c10::intrusive_ptr<c10d::Work> Enqueue(
      c10d::OpType type, const std::string& what,
      std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
      Body body, const std::vector<at::Tensor>& touched = {});
  // Throws unless 0 <= root < size.
  void CheckRoot(const std::string& op, int64_t root) const;

  // Shared by every starling group of the process and by the Python
  // module, which may each be the last to let go of it.
  const std::shared_ptr<CollectiveExecutor> executor_;
  const std::chrono::milliseconds timeout_;
  const std::vector<int> slot_of_rank_;
  std::atomic<uint64_t> ops_{0};  // relaxed: a counter for messages
};

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_PROCESS_GROUP_STARLING_H_
