#include "server/node/sync/step_data_path.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"
#include "server/collective/data_type.h"
#include "server/collective/reduce_kernels.h"
#include "server/node/run/float_bytes.h"

namespace starling {
namespace node {

StepDataPath::StepDataPath(collective::Communicator* comm, NodeMetrics* metrics)
    : comm_(comm), metrics_(metrics) {}

namespace {

using collective::DataType;

// dst += n 16-bit values of `type`, widened a block at a time on the stack.
void WidenAdd(DataType type, const std::byte* src, float* dst, size_t n) {
  constexpr size_t kBlock = 1024;
  float block[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    collective::ToFloat32(type, src + i * sizeof(uint16_t), block, m);
    for (size_t j = 0; j < m; ++j) dst[i + j] += block[j];
  }
}

// Elements [begin, end) of a 16-bit run's wire staging.
absl::Span<std::byte> WireBytes(SyncRun& run, uint64_t begin, uint64_t end) {
  return {reinterpret_cast<std::byte*>(run.wire16.data() + begin),
          (end - begin) * sizeof(uint16_t)};
}

}  // namespace

absl::Status StepDataPath::ReduceBucket(const std::vector<Round>& rounds,
                                        SyncRun& run, int bucket,
                                        const collective::CallOptions& call) {
  STARLING_RETURN_IF_ERROR(LocalReduce(rounds, run, bucket));
  const Bucket& b = run.buckets[bucket];
  if (b.end == b.begin) return absl::OkStatus();
  float* grads = run.store->gradients().data();
  if (run.wire != DataType::kFloat32) {
    collective::FromFloat32(run.wire, grads + b.begin,
                            run.wire16.data() + b.begin, b.end - b.begin);
  }
  const absl::Time start = absl::Now();
  absl::Span<std::byte> wire =
      run.wire == DataType::kFloat32
          ? AsBytes(run.store->gradients().subspan(b.begin, b.end - b.begin))
          : WireBytes(run, b.begin, b.end);
  STARLING_RETURN_IF_ERROR(Annotate(
      comm_->ReduceScatter(wire, run.wire, collective::ReduceOp::kSum, call),
      absl::StrCat("reduce-scatter of bucket ", bucket)));
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->collective_bytes->Increment(static_cast<double>(wire.size()));
  float* master = run.master_gradients.data() + b.master_offset;
  const size_t owned = b.owned_end - b.owned_begin;
  if (run.wire == DataType::kFloat32) {
    std::memcpy(master, grads + b.owned_begin, owned * sizeof(float));
  } else {
    collective::ToFloat32(run.wire, run.wire16.data() + b.owned_begin, master,
                          owned);
  }
  return absl::OkStatus();
}

absl::Status StepDataPath::UpdateAndGather(
    SyncRun& run, int64_t step, const collective::CallOptions& call) {
  STARLING_RETURN_IF_ERROR(UpdateMaster(run, step));
  return Gather(run, call);
}

absl::Status StepDataPath::UpdateMaster(SyncRun& run, int64_t step) {
  if (run.replica != nullptr) {
    // What this update overwrites, should the group lose a daemon before
    // the step commits everywhere (sync_run.h): sized at creation, so a
    // copy, no allocation.
    std::copy(run.master.begin(), run.master.end(), run.undo_master.begin());
    const absl::Span<const float> state = run.optimizer->state();
    std::copy(state.begin(), state.end(), run.undo_state.begin());
  }
  STARLING_RETURN_IF_ERROR(Annotate(
      run.optimizer->Apply(
          absl::MakeSpan(run.master),
          absl::MakeConstSpan(run.master_gradients).first(run.master.size()),
          step + 1),
      "optimizer"));
  run.master_version = step + 1;
  return absl::OkStatus();
}

absl::Status StepDataPath::Gather(SyncRun& run,
                                  const collective::CallOptions& call) {
  float* params = run.store->parameters().data();
  const absl::Time start = absl::Now();
  for (size_t k = 0; k < run.buckets.size(); ++k) {
    const Bucket& b = run.buckets[k];
    if (b.end == b.begin) continue;
    const float* master = run.master.data() + b.master_offset;
    const size_t owned = b.owned_end - b.owned_begin;
    absl::Span<std::byte> wire;
    if (run.wire == DataType::kFloat32) {
      std::memcpy(params + b.owned_begin, master, owned * sizeof(float));
      wire = AsBytes(run.store->parameters().subspan(b.begin, b.end - b.begin));
    } else {
      collective::FromFloat32(run.wire, master,
                              run.wire16.data() + b.owned_begin, owned);
      wire = WireBytes(run, b.begin, b.end);
    }
    STARLING_RETURN_IF_ERROR(
        Annotate(comm_->AllGather(wire, run.wire, call),
                 absl::StrCat("all-gather of bucket ", k)));
    metrics_->collective_bytes->Increment(static_cast<double>(wire.size()));
    if (run.wire != DataType::kFloat32) {
      collective::ToFloat32(run.wire, run.wire16.data() + b.begin,
                            params + b.begin, b.end - b.begin);
    }
  }
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status StepDataPath::AllReduceMax(float* vote,
                                        const collective::CallOptions& call) {
  return comm_->AllReduce({reinterpret_cast<std::byte*>(vote), sizeof(float)},
                          DataType::kFloat32, collective::ReduceOp::kMax, call);
}

absl::Status StepDataPath::Vote(float* vote,
                                const collective::CallOptions& call) {
  return Annotate(AllReduceMax(vote, call), "the vote on a durable checkpoint");
}

absl::Status StepDataPath::HandToBuddy(SyncRun& run, int64_t step,
                                       const collective::CallOptions& call,
                                       float* vote) {
  ShardReplica& replica = *run.replica;
  const absl::Time start = absl::Now();
  const int size = comm_->size();
  // In place: the master gradients are the shift's buffer (sync_run.h).
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->Shift(AsBytes(absl::MakeSpan(run.master_gradients)),
                            DataType::kFloat32, replica.distance, call),
               absl::StrCat("handing the shard's gradient to its buddy, rank ",
                            (comm_->rank() + replica.distance) % size,
                            ", and taking rank ", replica.of_rank, "'s")));
  replica.gradient_version = step + 1;
  // Once any daemon passes this, every buddy holds its owner's gradient
  // (an all-reduce is a barrier too: no rank's result is whole before
  // every rank gave its part).
  STARLING_RETURN_IF_ERROR(Annotate(
      vote != nullptr ? AllReduceMax(vote, call) : comm_->Barrier(call),
      "waiting for every buddy to hold its owner's gradient"));
  metrics_->replicated_bytes->Increment(
      static_cast<double>(replica.half * sizeof(float)));
  metrics_->replication_seconds->Increment(
      absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status StepDataPath::UpdateReplica(SyncRun& run, int64_t step) {
  ShardReplica& replica = *run.replica;
  const absl::Span<const float> grads =
      absl::MakeConstSpan(run.master_gradients)
          .subspan(replica.half, replica.master.size());
  const absl::Status applied =
      replica.optimizer->Apply(absl::MakeSpan(replica.master), grads, step + 1);
  if (!applied.ok()) {
    metrics_->replica_lag_steps->Set(
        static_cast<double>(step + 1 - replica.version));
    return Annotate(applied, absl::StrCat("the replica of rank ",
                                          replica.of_rank, "'s shard"));
  }
  replica.version = step + 1;
  metrics_->replica_lag_steps->Set(0);
  // The owner all-gathered its version step + 1: the replica must hold the
  // same values (the same optimizer on the same inputs).
  const absl::Span<const float> params = run.store->parameters();
  if (run.wire != DataType::kFloat32) {
    collective::FromFloat32(run.wire, replica.master.data(),
                            replica.narrowed.data(), replica.master.size());
  }
  for (const ShardReplica::Part& part : replica.parts) {
    const size_t n = part.end - part.begin;
    const float* mine = replica.master.data() + part.offset;
    bool equal;
    if (run.wire == DataType::kFloat32) {
      equal =
          std::memcmp(mine, params.data() + part.begin, n * sizeof(float)) == 0;
    } else {
      equal = std::memcmp(replica.narrowed.data() + part.offset,
                          run.wire16.data() + part.begin,
                          n * sizeof(uint16_t)) == 0;
    }
    if (!equal) {
      metrics_->replica_mismatches->Increment();
      const bool first = replica.exact;
      replica.exact = false;
      const absl::Status diverged = absl::DataLossError(absl::StrCat(
          "the replica of rank ", replica.of_rank, "'s shard diverged at ",
          "version ", step + 1, " (elements ", part.begin, "-", part.end,
          " differ from what rank ", replica.of_rank, " all-gathered)"));
      return first ? diverged : absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

void StepDataPath::TakeMaster(SyncRun& run) {
  const absl::Span<const float> params = run.store->parameters();
  for (const Bucket& b : run.buckets) {
    std::memcpy(run.master.data() + b.master_offset,
                params.data() + b.owned_begin,
                (b.owned_end - b.owned_begin) * sizeof(float));
  }
  if (run.replica != nullptr) {
    for (const ShardReplica::Part& part : run.replica->parts) {
      std::memcpy(run.replica->master.data() + part.offset,
                  params.data() + part.begin,
                  (part.end - part.begin) * sizeof(float));
    }
  }
}

absl::Status StepDataPath::LocalReduce(const std::vector<Round>& rounds,
                                       SyncRun& run, int bucket) {
  // Each tensor's range of the gradient buffer is written once, in one pass
  // over memory: the sum of the buffers pushed for it, read in place from
  // the workers' pools in worker-index order (the first copied, the others
  // added, as the reduce kernels do), or zeros where no worker pushed it.
  // Starting from the first buffer rather than from a zeroed accumulator
  // changes one thing only: an element that is -0.0 in every pushed buffer
  // now sums to -0.0 (IEEE), where 0.0 + -0.0 made it +0.0.
  const TensorLayout& layout = run.layout;
  const Bucket& b = run.buckets[bucket];
  absl::Span<float> grads = run.store->gradients();
  // Reused across steps: each tensor's list keeps its capacity.
  std::vector<std::vector<absl::Span<const std::byte>>>& inputs =
      reduce_inputs_;
  inputs.resize(layout.tensors.size());
  for (int t = b.first_tensor; t < b.end_tensor; ++t) inputs[t].clear();
  for (const Round& round : rounds) {
    for (const proto::PoolSlice& slice :
         round.request.push_gradients().slices()) {
      STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                                layout.Find(slice.tensor()));
      const int t = static_cast<int>(entry - layout.tensors.data());
      if (t < b.first_tensor || t >= b.end_tensor) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "' from ",
                         round.worker.name, " pushed in bucket ", bucket,
                         " but it is in bucket ", entry->spec.bucket()));
      }
      if (slice.elements() != entry->elements) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "' from ",
                         round.worker.name, ": ", slice.elements(),
                         " elements pushed, ", entry->elements, " declared"));
      }
      STARLING_ASSIGN_OR_RETURN(
          absl::Span<std::byte> src,
          round.worker.pool->Bytes(slice,
                                   ::starling::DataTypeBytes(entry->type)));
      inputs[t].push_back(src);
    }
  }
  double bytes = 0;
  for (int t = b.first_tensor; t < b.end_tensor; ++t) {
    const TensorLayout::Entry& entry = layout.tensors[t];
    absl::Span<float> dst = grads.subspan(entry.offset, entry.elements);
    const DataType type = entry.type;
    if (inputs[t].empty()) {
      std::fill(dst.begin(), dst.end(), 0.0f);
      bytes += static_cast<double>(dst.size()) * sizeof(float);
      continue;
    }
    if (type == DataType::kFloat32) {
      STARLING_RETURN_IF_ERROR(
          collective::ReduceMany(DataType::kFloat32, collective::ReduceOp::kSum,
                                 AsBytes(dst), inputs[t]));
    } else {
      // float32 accumulation of 16-bit gradients.
      collective::ToFloat32(type, inputs[t][0].data(), dst.data(), dst.size());
      for (size_t i = 1; i < inputs[t].size(); ++i) {
        WidenAdd(type, inputs[t][i].data(), dst.data(), dst.size());
      }
    }
    // Each input read once, the sum written once.
    bytes += static_cast<double>(inputs[t].size()) * inputs[t][0].size() +
             static_cast<double>(dst.size()) * sizeof(float);
  }
  metrics_->local_reduce_copied_bytes->Increment(bytes);
  return absl::OkStatus();
}

absl::Status StepDataPath::CopyParameters(
    const WorkerHandle& worker, const proto::PullParametersRequest& pull,
    const SyncRun& run) const {
  const absl::Span<const float> params = run.store->parameters();
  for (const proto::PoolSlice& slice : pull.slices()) {
    STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                              run.layout.Find(slice.tensor()));
    if (slice.elements() != entry->elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                       " elements asked, ", entry->elements, " declared"));
    }
    const DataType type = entry->type;
    STARLING_ASSIGN_OR_RETURN(
        absl::Span<std::byte> dst,
        worker.pool->Bytes(slice, ::starling::DataTypeBytes(type)));
    collective::FromFloat32(type, params.data() + entry->offset, dst.data(),
                            entry->elements);
    metrics_->pull_copied_bytes->Increment(
        static_cast<double>(entry->elements * sizeof(float) + dst.size()));
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
