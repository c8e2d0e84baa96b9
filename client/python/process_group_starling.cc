// ProcessGroupStarling: creation, the reductions, broadcast, barrier and
// the point-to-point ops it refuses. The gathers, scatter and all-to-all
// are in process_group_starling_gather.cc.
//
// Every op has the same shape: at the call, the arguments are checked and
// the tensors staged (Staged: inputs that are not dense host tensors are
// copied now); on the executor thread, its body packs them into the
// scratch region, runs the collective(s) and unpacks the results. The
// reductions and broadcast launch their one collective and unpack when it
// completes, so that the next op is staged and queued meanwhile.
#include "client/python/process_group_starling.h"

#include <ATen/ATen.h>

#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/python/starling_work.h"
#include "client/python/tensor_staging.h"

namespace starling {
namespace torch_backend {
namespace {

using Context = CollectiveExecutor::Context;

// Packs `tensors` one after the other and launches their all-reduce; when
// it completes and `keep`, the results are unpacked and written back (the
// next op's body runs meanwhile: see CollectiveExecutor).
absl::Status ReduceTensors(Context& context, const std::vector<Staged>& tensors,
                           const ReductionPlan& plan, bool keep) {
  size_t bytes = 0;
  for (const Staged& t : tensors) bytes += ReductionBytes(t.host, plan);
  absl::StatusOr<absl::Span<std::byte>> scratch = context.Scratch(bytes);
  if (!scratch.ok()) return scratch.status();
  std::byte* at = scratch->data();
  for (const Staged& t : tensors) {
    PackReduction(t.host, plan, at);
    at += ReductionBytes(t.host, plan);
  }
  std::function<absl::Status()> finish;
  if (keep) {
    finish = [tensors, plan, from = scratch->data()] {
      // Results are written outside autograd, as in the body.
      at::NoGradGuard no_grad;
      const std::byte* at = from;
      for (const Staged& t : tensors) {
        UnpackReduction(at, plan, t.host);
        WriteBack(t);
        at += ReductionBytes(t.host, plan);
      }
      return absl::OkStatus();
    };
  }
  return context.Launch(STARLING_ALL_REDUCE, *scratch, plan.type, plan.op,
                        /*root=*/0, std::move(finish));
}

// What creation learns: every rank's slot.
struct Membership {
  std::vector<int> slot_of_rank;
};

// The body of creation (see Create in the header).
absl::Status Join(Context& context, int rank, int size, Membership& out) {
  absl::Status status =
      context.Collective(STARLING_BARRIER, {}, STARLING_INT32);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("the barrier that begins the run: ", status.message()));
  }
  const int total = context.total_workers();
  const int slot = context.slot();
  if (total != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "torch.distributed's world_size is ", size,
        " but the Starling job has ", total,
        " workers (daemons x local workers): start one torch process per "
        "worker of the job"));
  }
  if (slot < 0 || slot >= total) {
    return absl::InternalError(absl::StrCat(
        "the client says this worker's slot is ", slot, " of ", total));
  }
  absl::StatusOr<absl::Span<std::byte>> scratch =
      context.Scratch(sizeof(int32_t) * total);
  if (!scratch.ok()) return scratch.status();
  const int32_t mine = rank;
  std::memcpy(scratch->data() + sizeof(int32_t) * slot, &mine, sizeof(mine));
  status = context.Collective(STARLING_ALL_GATHER, *scratch, STARLING_INT32);
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("the all-gather of the ranks: ", status.message()));
  }
  std::map<int, std::vector<int>> slots_of;  // rank -> slots claiming it
  std::vector<std::string> out_of_range;
  for (int s = 0; s < total; ++s) {
    int32_t r = 0;
    std::memcpy(&r, scratch->data() + sizeof(int32_t) * s, sizeof(r));
    if (r < 0 || r >= size) {
      out_of_range.push_back(absl::StrCat("slot ", s, " has rank ", r));
    } else {
      slots_of[r].push_back(s);
    }
  }
  std::vector<std::string> duplicates;
  for (const auto& [r, slots] : slots_of) {
    if (slots.size() > 1) {
      duplicates.push_back(absl::StrCat("rank ", r, " is claimed by slots ",
                                        absl::StrJoin(slots, ", ")));
    }
  }
  if (!out_of_range.empty() || !duplicates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the workers' torch ranks are not a permutation of 0..", size - 1, ": ",
        absl::StrJoin(out_of_range, "; "),
        out_of_range.empty() || duplicates.empty() ? "" : "; ",
        absl::StrJoin(duplicates, "; "),
        " (every process must pass its own rank: RANK, or init_process_group("
        "rank=...))"));
  }
  out.slot_of_rank.assign(size, 0);
  for (const auto& [r, slots] : slots_of) out.slot_of_rank[r] = slots[0];
  return absl::OkStatus();
}

}  // namespace

c10::intrusive_ptr<ProcessGroupStarling> ProcessGroupStarling::Create(
    std::shared_ptr<CollectiveExecutor> executor, int rank, int size,
    std::chrono::milliseconds timeout) {
  if (size < 1 || rank < 0 || rank >= size) {
    ThrowError(absl::StrCat("process group: rank ", rank, " of world_size ",
                            size, " is not a rank of it"));
  }
  auto membership = std::make_shared<Membership>();
  auto ended = std::make_shared<std::promise<absl::Status>>();
  CollectiveExecutor::Op op;
  op.body = [rank, size, membership](Context& context) {
    return Join(context, rank, size, *membership);
  };
  op.done = [ended](const absl::Status& status) { ended->set_value(status); };
  executor->Submit(std::move(op));
  // Bounded: every collective of the body is (the executor's timeout).
  const absl::Status status = ended->get_future().get();
  if (!status.ok()) {
    ThrowError(absl::StrCat("process group (rank ", rank, " of ", size,
                            "): ", status.message(), " (",
                            absl::StatusCodeToString(status.code()), ")"));
  }
  return c10::make_intrusive<ProcessGroupStarling>(
      std::move(executor), rank, size, timeout,
      std::move(membership->slot_of_rank));
}

ProcessGroupStarling::ProcessGroupStarling(
    std::shared_ptr<CollectiveExecutor> executor, int rank, int size,
    std::chrono::milliseconds timeout, std::vector<int> slot_of_rank)
    : c10d::ProcessGroup(rank, size),
      executor_(std::move(executor)),
      timeout_(timeout),
      slot_of_rank_(std::move(slot_of_rank)) {
  init();
}

ProcessGroupStarling::~ProcessGroupStarling() = default;

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::Enqueue(
    c10d::OpType type, const std::string& what, std::vector<at::Tensor> outputs,
    std::chrono::milliseconds timeout, Body body,
    const std::vector<at::Tensor>& touched) {
  const uint64_t number = ops_.fetch_add(1, std::memory_order_relaxed) + 1;
  auto work = c10::make_intrusive<StarlingWork>(
      rank_, type, absl::StrCat(what, ", op ", number, " of rank ", rank_),
      std::move(outputs), timeout == c10d::kUnsetTimeout ? timeout_ : timeout);
  CollectiveExecutor::Op op;
  op.body = [body = std::move(body)](Context& context) {
    // The executor thread's grad mode is its own: writing results into
    // tensors that require grad is not an autograd operation.
    at::NoGradGuard no_grad;
    return body(context);
  };
  op.done = [work](const absl::Status& status) { work->Complete(status); };
  // Whole storages: views of one tensor overlap.
  for (const at::Tensor& t : touched) {
    const auto begin = reinterpret_cast<uintptr_t>(t.storage().data());
    op.touches.emplace_back(begin, begin + t.storage().nbytes());
  }
  executor_->Submit(std::move(op));
  return work;
}

void ProcessGroupStarling::CheckRoot(const std::string& op,
                                     int64_t root) const {
  if (root < 0 || root >= size_) {
    ThrowError(absl::StrCat(op, ": root rank ", root, " is not a rank of this ",
                            size_, "-process group"));
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = OnlyTensor("allreduce", tensors);
  const ReductionPlan plan =
      PlanOrThrow("allreduce", tensor.scalar_type(), opts.reduceOp);
  std::vector<Staged> staged = {StageIn(tensor)};
  return Enqueue(c10d::OpType::ALLREDUCE,
                 absl::StrCat("allreduce (", Describe(tensor), ", ",
                              ReduceOpName(opts.reduceOp.op_), ")"),
                 {tensor}, opts.timeout,
                 [staged, plan](Context& context) {
                   return ReduceTensors(context, staged, plan, /*keep=*/true);
                 },
                 {tensor});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) ThrowError("allreduce_coalesced: no tensors");
  std::vector<Staged> staged;
  for (const at::Tensor& t : tensors) {
    CheckDense("allreduce_coalesced", t);
    const at::Tensor& tensor = t;
    if (tensor.scalar_type() != tensors[0].scalar_type()) {
      ThrowError(
          absl::StrCat("allreduce_coalesced: the tensors must have one "
                       "dtype: ",
                       Describe(tensors[0]), " and ", Describe(tensor)));
    }
    staged.push_back(StageIn(tensor));
  }
  const ReductionPlan plan = PlanOrThrow(
      "allreduce_coalesced", tensors[0].scalar_type(), opts.reduceOp);
  return Enqueue(
      c10d::OpType::ALLREDUCE_COALESCED,
      absl::StrCat("allreduce_coalesced (", tensors.size(), " tensors, ",
                   DtypeName(tensors[0].scalar_type()), ", ",
                   ReduceOpName(opts.reduceOp.op_), ")"),
      tensors, opts.timeout,
      [staged, plan](Context& context) {
        return ReduceTensors(context, staged, plan, /*keep=*/true);
      },
      tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  const at::Tensor& tensor = OnlyTensor("reduce", tensors);
  CheckRoot("reduce", opts.rootRank);
  if (opts.rootTensor != 0) ThrowError("reduce: root_tensor must be 0");
  const ReductionPlan plan =
      PlanOrThrow("reduce", tensor.scalar_type(), opts.reduceOp);
  std::vector<Staged> staged = {StageIn(tensor)};
  const bool keep = opts.rootRank == rank_;
  return Enqueue(c10d::OpType::REDUCE,
                 absl::StrCat("reduce (", Describe(tensor), ", ",
                              ReduceOpName(opts.reduceOp.op_), ", root ",
                              opts.rootRank, ")"),
                 {tensor}, opts.timeout,
                 [staged, plan, keep](Context& context) {
                   return ReduceTensors(context, staged, plan, keep);
                 },
                 {tensor});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  const at::Tensor& tensor = OnlyTensor("broadcast", tensors);
  CheckRoot("broadcast", opts.rootRank);
  if (opts.rootTensor != 0) ThrowError("broadcast: root_tensor must be 0");
  const bool root = opts.rootRank == rank_;
  // Only the root's values travel.
  const Staged staged = root ? StageIn(tensor) : StageOut(tensor);
  const int root_slot = slot_of_rank_[opts.rootRank];
  return Enqueue(c10d::OpType::BROADCAST,
                 absl::StrCat("broadcast (", Describe(tensor), ", root ",
                              opts.rootRank, ")"),
                 {tensor}, opts.timeout,
                 [staged, root, root_slot](Context& context) {
                   absl::StatusOr<absl::Span<std::byte>> scratch =
                       context.Scratch(PaddedBytes(staged.host.nbytes()));
                   if (!scratch.ok()) return scratch.status();
                   if (root) PackBytes(staged.host, scratch->data());
                   std::function<absl::Status()> finish;
                   if (!root) {
                     finish = [staged, from = scratch->data()] {
                       at::NoGradGuard no_grad;
                       UnpackBytes(from, staged.host);
                       WriteBack(staged);
                       return absl::OkStatus();
                     };
                   }
                   return context.Launch(STARLING_BROADCAST, *scratch,
                                         STARLING_INT32, STARLING_SUM,
                                         root_slot, std::move(finish));
                 },
                 {tensor});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::barrier(
    const c10d::BarrierOptions& opts) {
  return Enqueue(
      c10d::OpType::BARRIER, "barrier", {}, opts.timeout, [](Context& context) {
        return context.Collective(STARLING_BARRIER, {}, STARLING_INT32);
      });
}

namespace {

[[noreturn]] void PointToPoint(const std::string& op) {
  ThrowError(absl::StrCat(
      op,
      ": point-to-point operations are not supported: Starling's daemons run "
      "collectives only. Use broadcast(src=...) or all_gather instead, or "
      "send and receive on a gloo group: "
      "torch.distributed.new_group(backend=\"gloo\")"));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::send(
    std::vector<at::Tensor>&, int, int) {
  PointToPoint("send");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::recv(
    std::vector<at::Tensor>&, int, int) {
  PointToPoint("recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupStarling::recvAnysource(
    std::vector<at::Tensor>&, int) {
  PointToPoint("recv (from any source)");
}

}  // namespace torch_backend
}  // namespace starling
