#include "server/collective/communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/collective/butterfly.h"
#include "server/collective/op_context.h"
#include "server/collective/reduce_broadcast.h"
#include "server/collective/ring.h"
#include "server/collective/shift.h"
#include "server/collective/tree.h"

namespace starling {
namespace collective {
namespace {

size_t ScratchBytes(Algorithm algorithm, OpKind kind, size_t count,
                    size_t element_bytes, int size, int rank,
                    size_t doubling_max_bytes) {
  switch (algorithm) {
    case Algorithm::kButterfly:
      return ButterflyScratchBytes(kind, count, element_bytes, size,
                                   doubling_max_bytes);
    case Algorithm::kRing:
      return RingScratchBytes(kind, count, element_bytes, size);
    case Algorithm::kTree:
      return TreeScratchBytes(kind, count, element_bytes, size);
    case Algorithm::kReduceBroadcast:
      return ReduceBroadcastScratchBytes(kind, count, element_bytes, size,
                                         rank);
    case Algorithm::kAuto:
      break;
  }
  return 0;
}

using AlgorithmFn = absl::Status (*)(OpContext*);

AlgorithmFn Dispatch(OpKind kind, Algorithm algorithm) {
  // Rows: butterfly, ring, tree, reduce-broadcast.
  static constexpr AlgorithmFn kAllReduce[] = {ButterflyAllReduce,
                                               RingAllReduce, TreeAllReduce,
                                               ReduceBroadcastAllReduce};
  static constexpr AlgorithmFn kReduceScatter[] = {
      ButterflyReduceScatter, RingReduceScatter, TreeReduceScatter,
      ReduceBroadcastReduceScatter};
  static constexpr AlgorithmFn kAllGather[] = {ButterflyAllGather,
                                               RingAllGather, TreeAllGather,
                                               ReduceBroadcastAllGather};
  static constexpr AlgorithmFn kBroadcast[] = {ButterflyBroadcast,
                                               RingBroadcast, TreeBroadcast,
                                               ReduceBroadcastBroadcast};
  if (algorithm == Algorithm::kAuto) return nullptr;
  const int index = static_cast<int>(algorithm) - 1;
  switch (kind) {
    case OpKind::kAllReduce:
      return kAllReduce[index];
    case OpKind::kReduceScatter:
      return kReduceScatter[index];
    case OpKind::kAllGather:
      return kAllGather[index];
    case OpKind::kBroadcast:
      return kBroadcast[index];
    case OpKind::kBarrier:
    case OpKind::kShift:
      break;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    transport::Transport* transport, const Options& options) {
  if (transport == nullptr) {
    return absl::InvalidArgumentError("communicator over a null transport");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator timeout must be positive, got ",
                     absl::FormatDuration(options.timeout)));
  }
  if (options.chunk_bytes == 0) {
    return absl::InvalidArgumentError("communicator chunk_bytes must be > 0");
  }
  return std::unique_ptr<Communicator>(new Communicator(transport, options));
}

Communicator::Communicator(transport::Transport* transport,
                           const Options& options)
    : transport_(transport),
      options_(options),
      descriptors_(transport, kOpDescriptorTag),
      notices_(transport, kOpNoticeTag) {
  completions_.reserve(transport->size());
  for (int i = 0; i < transport->size(); ++i) {
    completions_.push_back(std::make_unique<transport::Completion>());
  }
}

int Communicator::rank() const { return transport_->rank(); }
int Communicator::size() const { return transport_->size(); }

absl::Status Communicator::AllReduce(absl::Span<std::byte> data, DataType type,
                                     ReduceOp op, const CallOptions& call) {
  return Run(OpKind::kAllReduce, data, type, op, 0, call);
}

absl::Status Communicator::ReduceScatter(absl::Span<std::byte> data,
                                         DataType type, ReduceOp op,
                                         const CallOptions& call) {
  return Run(OpKind::kReduceScatter, data, type, op, 0, call);
}

absl::Status Communicator::AllGather(absl::Span<std::byte> data, DataType type,
                                     const CallOptions& call) {
  return Run(OpKind::kAllGather, data, type, ReduceOp::kSum, 0, call);
}

absl::Status Communicator::Broadcast(absl::Span<std::byte> data, DataType type,
                                     int root, const CallOptions& call) {
  return Run(OpKind::kBroadcast, data, type, ReduceOp::kSum, root, call);
}

void Communicator::SkipTo(uint64_t seq) {
  if (seq > next_seq_) next_seq_ = seq;
  // Ops below `seq` have ended here or will never run here.
  RetireOpsBelow(seq);
}

void Communicator::RetireOpsBelow(uint64_t end) {
  if (!options_.retire_stale_regions || end <= retired_end_) return;
  // The ids of ops [a, b) are one contiguous range, so the transport keeps
  // the retired set as one growing range.
  transport_->RetireRegions(OpRegionIdsBegin(retired_end_),
                            OpRegionIdsBegin(end));
  retired_end_ = end;
}

absl::Status Communicator::Shift(absl::Span<std::byte> data, DataType type,
                                 int distance, const CallOptions& call) {
  return Run(OpKind::kShift, data, type, ReduceOp::kSum, distance, call);
}

absl::Status Communicator::Barrier(const CallOptions& call) {
  return Run(OpKind::kBarrier, absl::Span<std::byte>(), DataType::kFloat32,
             ReduceOp::kSum, 0, call);
}

absl::Status Communicator::Run(OpKind kind, absl::Span<std::byte> data,
                               DataType type, ReduceOp op, int root,
                               const CallOptions& call) {
  // The sequence number is taken even by a call rejected here, so that this
  // rank stays in step with the others (which will time out naming it).
  const uint64_t seq = next_seq_++;
  absl::Status status = RunOp(seq, kind, data, type, op, root, call);
  // Peers may still write into a failed op (they may not have noticed yet,
  // or were cancelled after posting): from now on the transport drops those
  // writes instead of holding them. A rejected call counts too, since the
  // other ranks run the op and write to us.
  if (!status.ok()) RetireOpsBelow(seq + 1);
  return status;
}

absl::Status Communicator::RunOp(uint64_t seq, OpKind kind,
                                 absl::Span<std::byte> data, DataType type,
                                 ReduceOp op, int root,
                                 const CallOptions& call) {
  const size_t element_bytes = DataTypeBytes(type);
  const absl::Duration timeout = call.timeout.value_or(options_.timeout);
  const std::string what = absl::StrCat(OpKindName(kind), " op ", seq);
  if (data.size() % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": buffer of ", data.size(), " bytes is not a whole number of ",
        DataTypeName(type), " elements"));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": timeout must be positive, got ",
                     absl::FormatDuration(timeout)));
  }
  if (kind == OpKind::kShift) {
    if (size() > 1 && (root < 1 || root >= size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": distance ", root, " is not in [1, ", size() - 1,
                       "] for a group of ", size()));
    }
    if (data.size() / element_bytes % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": buffer of ", data.size() / element_bytes, " ",
          DataTypeName(type),
          " elements does not split into an outgoing and an incoming half"));
    }
  } else if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": root ", root, " is not a rank of a group of ", size()));
  }
  OpDescriptor desc;
  desc.seq = seq;
  desc.kind = kind;
  desc.dtype = type;
  desc.op = op;
  desc.count = data.size() / element_bytes;
  desc.root = root;
  desc.algorithm = kind == OpKind::kBarrier || kind == OpKind::kShift
                       ? Algorithm::kAuto
                       : SelectAlgorithm(options_.selector, kind, data.size(),
                                         size(), call.algorithm);
  AlgorithmFn fn =
      kind == OpKind::kShift ? ShiftExchange : Dispatch(kind, desc.algorithm);
  const size_t scratch_bytes =
      ScratchBytes(desc.algorithm, kind, desc.count, element_bytes, size(),
                   rank(), options_.selector.doubling_max_bytes);
  if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);

  CollectiveObserver* const observer = options_.observer;
  OpContext ctx(transport_, &descriptors_, &notices_, desc, timeout, data,
                absl::MakeSpan(scratch_).first(scratch_bytes),
                options_.chunk_bytes, options_.selector.doubling_max_bytes,
                &completions_, call.cancel, observer);
  if (observer != nullptr) observer->OpStarted(desc, data.size(), ctx.start());
  absl::Status status = ctx.Start();
  if (status.ok() && fn != nullptr) status = fn(&ctx);
  status = ctx.Finish(std::move(status));
  if (observer != nullptr) {
    observer->OpEnded(desc, data.size(), status, absl::Now() - ctx.start(),
                      ctx.arrival());
  }
  return status;
}

}  // namespace collective
}  // namespace starling
