#include "server/node/run/shared_rounds.h"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "server/base/proto_data_type.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"
#include "server/collective/data_type.h"
#include "server/collective/reduce_kernels.h"
#include "server/node/run/float_bytes.h"
#include "server/shard/finite_check.h"

namespace starling {
namespace node {

using collective::DataType;

SharedRounds::SharedRounds(collective::Communicator* comm, NodeMetrics* metrics)
    : comm_(comm), metrics_(metrics) {}

absl::Status SharedRounds::AllReduce(const std::vector<Round>& rounds,
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

absl::Status SharedRounds::CheckInitialParameters(
    const Round& supplier, const std::vector<proto::TensorSpec>& tensors) {
  for (const proto::PoolSlice& slice :
       supplier.request.commit_tensors().initial_parameters()) {
    const proto::TensorSpec* spec = nullptr;
    for (const proto::TensorSpec& t : tensors) {
      if (t.name() == slice.tensor()) spec = &t;
    }
    const std::string what =
        absl::StrCat("initial parameters of tensor '", slice.tensor(),
                     "' from ", supplier.worker.name);
    if (spec == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no such tensor was declared"));
    }
    if (slice.elements() != proto::ElementsOf(*spec)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", slice.elements(), " elements, declared ",
                       proto::DescribeSpec(*spec)));
    }
    absl::StatusOr<absl::Span<std::byte>> bytes =
        supplier.worker.pool->Bytes(slice, proto::ElementBytes(spec->dtype()));
    if (!bytes.ok()) return Annotate(bytes.status(), what);
    // Training from NaN or infinity would run on without an error anywhere
    // (gradients are checked, parameters are not after this).
    STARLING_ASSIGN_OR_RETURN(const DataType type,
                              proto::DataTypeFromProto(spec->dtype()));
    std::vector<float> values(slice.elements());
    collective::ToFloat32(type, bytes->data(), values.data(), values.size());
    STARLING_RETURN_IF_ERROR(shard::CheckFinite(values, what));
  }
  return absl::OkStatus();
}

absl::Status SharedRounds::InitializeParameters(
    const Round* supplier, Run& run, const collective::CallOptions& call) {
  absl::Span<float> params = run.store->parameters();
  if (supplier != nullptr) {
    for (const proto::PoolSlice& slice :
         supplier->request.commit_tensors().initial_parameters()) {
      STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                                run.layout.Find(slice.tensor()));
      const DataType type = entry->type;
      STARLING_ASSIGN_OR_RETURN(
          absl::Span<std::byte> src,
          supplier->worker.pool->Bytes(slice, ::starling::DataTypeBytes(type)));
      collective::ToFloat32(type, src.data(), params.data() + entry->offset,
                            entry->elements);
    }
  }
  if (comm_->size() > 1) {
    // The lowest rank with a supplier broadcasts.
    int32_t root = supplier != nullptr ? comm_->rank() : INT32_MAX;
    STARLING_RETURN_IF_ERROR(Annotate(
        comm_->AllReduce({reinterpret_cast<std::byte*>(&root), sizeof(root)},
                         DataType::kInt32, collective::ReduceOp::kMin, call),
        "agreeing on the initial parameters' supplier"));
    if (root != INT32_MAX && !params.empty()) {
      STARLING_RETURN_IF_ERROR(Annotate(
          comm_->Broadcast(AsBytes(params), DataType::kFloat32, root, call),
          absl::StrCat("broadcast of the initial parameters from "
                       "rank ",
                       root)));
      metrics_->collective_bytes->Increment(
          static_cast<double>(params.size() * sizeof(float)));
    }
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
