#include "server/node/run/shared_rounds.h"

#include <algorithm>
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
#include "server/transport/crc32c.h"

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

absl::StatusOr<SharedRounds::InitialValues> SharedRounds::InitialValuesOf(
    const Round& supplier, const std::vector<proto::TensorSpec>& tensors) {
  InitialValues values;
  for (const proto::PoolSlice& slice :
       supplier.request.commit_tensors().initial_parameters()) {
    size_t index = 0;
    while (index < tensors.size() && tensors[index].name() != slice.tensor()) {
      ++index;
    }
    if (index == tensors.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initial parameters of undeclared tensor '", slice.tensor(), "'"));
    }
    const proto::TensorSpec& spec = tensors[index];
    STARLING_ASSIGN_OR_RETURN(const DataType type,
                              proto::DataTypeFromProto(spec.dtype()));
    STARLING_ASSIGN_OR_RETURN(
        absl::Span<std::byte> bytes,
        supplier.worker.pool->Bytes(slice, proto::ElementBytes(spec.dtype())));
    std::vector<float> floats(slice.elements());
    collective::ToFloat32(type, bytes.data(), floats.data(), floats.size());
    values.emplace_back(index, std::move(floats));
  }
  std::sort(values.begin(), values.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return values;
}

uint32_t SharedRounds::InitialCrc32c(const InitialValues& values) {
  uint32_t crc = 0;
  for (const auto& [index, floats] : values) {
    const uint64_t tensor = index;
    crc = transport::Crc32cExtend(crc, &tensor, sizeof(tensor));
    crc = transport::Crc32cExtend(crc, floats.data(),
                                  floats.size() * sizeof(float));
  }
  return crc;
}

absl::Status SharedRounds::CompareInitialValues(
    const InitialValues& a, absl::string_view a_name, const InitialValues& b,
    absl::string_view b_name, const std::vector<proto::TensorSpec>& tensors) {
  const std::string rule =
      " (every worker that sets the run's initial parameters must set the "
      "same, bit for bit; or offer them, and the first offer is taken)";
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size() || a[i].first != b[i].first) {
      const bool a_has =
          i < a.size() && (i >= b.size() || a[i].first < b[i].first);
      const size_t tensor = a_has ? a[i].first : b[i].first;
      return absl::InvalidArgumentError(absl::StrCat(
          "workers ", a_name, " and ", b_name,
          " set different initial parameters: tensor '", tensors[tensor].name(),
          "' is set by ", a_has ? a_name : b_name, " only", rule));
    }
    const std::vector<float>& x = a[i].second;
    const std::vector<float>& y = b[i].second;
    for (size_t e = 0; e < x.size(); ++e) {
      if (std::memcmp(&x[e], &y[e], sizeof(float)) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "workers ", a_name, " and ", b_name,
            " set different initial parameters: tensor '",
            tensors[a[i].first].name(), "' element ", e, " is ", x[e], " from ",
            a_name, " and ", y[e], " from ", b_name, rule));
      }
    }
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
    // The lowest rank whose workers set the run's own broadcasts, or else
    // the lowest that offered some: one all-reduce of the minimum of
    // (rank) for the first, (size + rank) for the second.
    const int32_t size = static_cast<int32_t>(comm_->size());
    int32_t root =
        supplier == nullptr
            ? INT32_MAX
            : (supplier->request.commit_tensors().offered() ? size : 0) +
                  static_cast<int32_t>(comm_->rank());
    STARLING_RETURN_IF_ERROR(Annotate(
        comm_->AllReduce({reinterpret_cast<std::byte*>(&root), sizeof(root)},
                         DataType::kInt32, collective::ReduceOp::kMin, call),
        "agreeing on the initial parameters' supplier"));
    if (root != INT32_MAX && root >= size) root -= size;
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
