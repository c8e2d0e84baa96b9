#include "server/node/step_data_path.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/base/status_macros.h"
#include "server/collective/reduce_kernels.h"
#include "server/node/float_bytes.h"

namespace starling {
namespace node {

StepDataPath::StepDataPath(collective::Communicator* comm, NodeMetrics* metrics)
    : comm_(comm), metrics_(metrics) {}

absl::Status StepDataPath::ApplyStep(const std::vector<Round>& rounds, Run& run,
                                     int64_t step,
                                     const collective::CallOptions& call) {
  shard::ShardStore& store = *run.store;
  STARLING_RETURN_IF_ERROR(LocalReduce(rounds, run));
  absl::Span<float> grads = store.gradients();
  const absl::Time comm_start = absl::Now();
  STARLING_RETURN_IF_ERROR(Annotate(
      comm_->ReduceScatter(AsBytes(grads), collective::DataType::kFloat32,
                           collective::ReduceOp::kSum, call),
      "reduce-scatter"));
  absl::Duration comm = absl::Now() - comm_start;
  STARLING_RETURN_IF_ERROR(
      Annotate(run.optimizer->Apply(store.shard_parameters(),
                                    store.shard_gradients(), step + 1),
               "optimizer"));
  const absl::Time gather_start = absl::Now();
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->AllGather(AsBytes(store.parameters()),
                                collective::DataType::kFloat32, call),
               "all-gather"));
  comm += absl::Now() - gather_start;
  metrics_->allreduce_seconds->Observe(absl::ToDoubleSeconds(comm));
  metrics_->collective_bytes->Increment(2.0 * grads.size() * sizeof(float));
  return absl::OkStatus();
}

absl::Status StepDataPath::LocalReduce(const std::vector<Round>& rounds,
                                       Run& run) {
  // Each tensor's range of the gradient buffer is written once, in one pass
  // over memory: the sum of the buffers pushed for it, read in place from
  // the workers' pools in worker-index order (the first copied, the others
  // added, as the reduce kernels do), or zeros where no worker pushed it.
  // Starting from the first buffer rather than from a zeroed accumulator
  // changes one thing only: an element that is -0.0 in every pushed buffer
  // now sums to -0.0 (IEEE), where 0.0 + -0.0 made it +0.0.
  const TensorLayout& layout = run.layout;
  absl::Span<float> grads = run.store->gradients();
  // Reused across steps: each tensor's list keeps its capacity.
  std::vector<std::vector<absl::Span<const std::byte>>>& inputs =
      reduce_inputs_;
  inputs.resize(layout.tensors.size());
  for (auto& tensor_inputs : inputs) tensor_inputs.clear();
  for (const Round& round : rounds) {
    for (const proto::PoolSlice& slice :
         round.request.push_gradients().slices()) {
      STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                                layout.Find(slice.tensor()));
      if (slice.elements() != entry->elements) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "' from ",
                         round.worker.name, ": ", slice.elements(),
                         " elements pushed, ", entry->elements, " declared"));
      }
      STARLING_ASSIGN_OR_RETURN(absl::Span<float> src,
                                round.worker.pool->Floats(slice));
      inputs[entry - layout.tensors.data()].push_back(AsConstBytes(src));
    }
  }
  double bytes = 0;
  for (size_t t = 0; t < layout.tensors.size(); ++t) {
    const TensorLayout::Entry& entry = layout.tensors[t];
    absl::Span<float> dst = grads.subspan(entry.offset, entry.elements);
    if (inputs[t].empty()) {
      std::fill(dst.begin(), dst.end(), 0.0f);
      bytes += static_cast<double>(dst.size()) * sizeof(float);
      continue;
    }
    STARLING_RETURN_IF_ERROR(collective::ReduceMany(
        collective::DataType::kFloat32, collective::ReduceOp::kSum,
        AsBytes(dst), inputs[t]));
    // Each input read once, the sum written once.
    bytes += (inputs[t].size() + 1.0) * dst.size() * sizeof(float);
  }
  metrics_->local_reduce_copied_bytes->Increment(bytes);
  return absl::OkStatus();
}

absl::Status StepDataPath::AllReduce(const std::vector<Round>& rounds,
                                     const std::string& where,
                                     const collective::CallOptions& call) {
  const size_t elements = rounds[0].request.all_reduce().slice().elements();
  // The workers' buffers are summed (one pass) into scratch_, which the
  // collective sends and reduces in place, and the result is copied back
  // into each buffer; a failed collective leaves the workers' buffers as
  // they were.
  scratch_.resize(elements);
  std::vector<absl::Span<const std::byte>> inputs;
  std::vector<absl::Span<float>> buffers;
  for (const Round& round : rounds) {
    absl::StatusOr<absl::Span<float>> src =
        round.worker.pool->Floats(round.request.all_reduce().slice());
    if (!src.ok()) return Annotate(src.status(), where);
    inputs.push_back(AsConstBytes(*src));
    buffers.push_back(*src);
  }
  absl::Span<std::byte> sum = AsBytes(absl::MakeSpan(scratch_));
  STARLING_RETURN_IF_ERROR(
      Annotate(collective::ReduceMany(collective::DataType::kFloat32,
                                      collective::ReduceOp::kSum, sum, inputs),
               where));
  metrics_->allreduce_staging_copied_bytes->Increment((inputs.size() + 1.0) *
                                                      sum.size());
  const absl::Time start = absl::Now();
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->AllReduce(sum, collective::DataType::kFloat32,
                                collective::ReduceOp::kSum, call),
               where));
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->collective_bytes->Increment(elements * sizeof(float));
  for (absl::Span<float> dst : buffers) {
    std::memcpy(dst.data(), scratch_.data(), sum.size());
  }
  metrics_->allreduce_staging_copied_bytes->Increment(2.0 * buffers.size() *
                                                      sum.size());
  return absl::OkStatus();
}

absl::Status StepDataPath::CopyParameters(
    const WorkerHandle& worker, const proto::PullParametersRequest& pull,
    const Run& run) const {
  const absl::Span<const float> params = run.store->parameters();
  for (const proto::PoolSlice& slice : pull.slices()) {
    STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                              run.layout.Find(slice.tensor()));
    if (slice.elements() != entry->elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                       " elements asked, ", entry->elements, " declared"));
    }
    STARLING_ASSIGN_OR_RETURN(absl::Span<float> dst,
                              worker.pool->Floats(slice));
    std::memcpy(dst.data(), params.data() + entry->offset,
                dst.size() * sizeof(float));
    metrics_->pull_copied_bytes->Increment(2.0 * dst.size() * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
