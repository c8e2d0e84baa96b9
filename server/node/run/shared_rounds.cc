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
using collective::ReduceOp;

SharedRounds::SharedRounds(collective::Communicator* comm, NodeMetrics* metrics)
    : comm_(comm), metrics_(metrics) {}

absl::Status SharedRounds::Collective(const std::vector<Round>& rounds,
                                      int total_workers,
                                      const std::string& where,
                                      const collective::CallOptions& call) {
  const proto::CollectiveRequest& request = rounds[0].request.collective();
  // Checked with the request (CheckWorkerRequest); a bad value here is ours.
  absl::StatusOr<DataType> parsed_type =
      proto::DataTypeFromProto(request.dtype());
  if (!parsed_type.ok()) return Annotate(parsed_type.status(), where);
  const DataType type = *parsed_type;
  const proto::CollectiveRequest::Kind kind = request.kind();
  const bool reduces = kind == proto::CollectiveRequest::KIND_ALL_REDUCE ||
                       kind == proto::CollectiveRequest::KIND_REDUCE_SCATTER;
  ReduceOp op = ReduceOp::kSum;
  if (reduces) {
    absl::StatusOr<ReduceOp> parsed_op = proto::ReduceOpFromProto(request.op());
    if (!parsed_op.ok()) return Annotate(parsed_op.status(), where);
    op = *parsed_op;
  }
  const size_t element_bytes = DataTypeBytes(type);
  const size_t elements = request.slice().elements();
  const size_t bytes = elements * element_bytes;
  const int local = static_cast<int>(rounds.size());
  const int daemons = comm_->size();
  const int first_slot = comm_->rank() * local;

  // Slots number the job's workers daemon by daemon, which needs every
  // daemon to have as many: the blocks of all-gather and reduce-scatter
  // are then each daemon's workers' blocks side by side.
  if (kind != proto::CollectiveRequest::KIND_ALL_REDUCE) {
    if (total_workers != daemons * local) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the job has ", total_workers, " workers, but ", daemons,
          " daemons x ", local, " local workers of this one make ",
          daemons * local,
          "; broadcast, all_gather and reduce_scatter number workers by slot "
          "(rank x local workers + worker index) and need every daemon to "
          "have as many workers (starling-node --local_workers)"));
    }
  }
  if ((kind == proto::CollectiveRequest::KIND_ALL_GATHER ||
       kind == proto::CollectiveRequest::KIND_REDUCE_SCATTER) &&
      elements % static_cast<size_t>(total_workers) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", elements, " elements are not ", total_workers,
                     " equal blocks, one per worker"));
  }
  if (kind == proto::CollectiveRequest::KIND_BROADCAST &&
      request.root() >= total_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": root slot ", request.root(),
                     " is not a worker's (the job has ", total_workers, ")"));
  }

  std::vector<absl::Span<std::byte>> buffers;
  for (const Round& round : rounds) {
    absl::StatusOr<absl::Span<std::byte>> buffer =
        // Each worker's own buffer: where it lies in its pool is its own
        // (the requests agree on kind, type and length, not on offsets).
        round.worker.pool->Bytes(round.request.collective().slice(),
                                 element_bytes);
    if (!buffer.ok()) return Annotate(buffer.status(), where);
    buffers.push_back(*buffer);
  }
  // A worker that says its buffer is scratch memory (a staging area it
  // refills for every op), alone on this daemon: the all-reduce or
  // broadcast runs in that buffer, without the copies in and out below.
  // Otherwise the collective runs in scratch_ (8-byte aligned for every
  // type) and the result is copied into the workers' buffers only once it
  // succeeded: a failed op leaves them as they were.
  const bool in_place =
      buffers.size() == 1 && request.scratch() &&
      (kind == proto::CollectiveRequest::KIND_ALL_REDUCE ||
       kind == proto::CollectiveRequest::KIND_BROADCAST) &&
      reinterpret_cast<uintptr_t>(buffers[0].data()) % alignof(uint64_t) == 0;
  absl::Span<std::byte> data;
  if (in_place) {
    data = buffers[0];
  } else {
    scratch_.resize((bytes + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    data = absl::Span<std::byte>(reinterpret_cast<std::byte*>(scratch_.data()),
                                 bytes);
  }
  const size_t block_bytes =
      total_workers > 0 ? bytes / static_cast<size_t>(total_workers) : 0;
  double copied = 0;
  const absl::Time start = absl::Now();
  switch (kind) {
    case proto::CollectiveRequest::KIND_ALL_REDUCE:
    case proto::CollectiveRequest::KIND_REDUCE_SCATTER: {
      // The workers' buffers combined in one pass, then across daemons.
      const ReduceOp local_op = op == ReduceOp::kAverage ? ReduceOp::kSum : op;
      if (!in_place) {
        std::vector<absl::Span<const std::byte>> inputs(buffers.begin(),
                                                        buffers.end());
        STARLING_RETURN_IF_ERROR(Annotate(
            collective::ReduceMany(type, local_op, data, inputs), where));
        copied += (inputs.size() + 1.0) * bytes;
      }
      if (kind == proto::CollectiveRequest::KIND_ALL_REDUCE) {
        STARLING_RETURN_IF_ERROR(
            Annotate(comm_->AllReduce(data, type, local_op, call), where));
        if (op == ReduceOp::kAverage) {
          STARLING_RETURN_IF_ERROR(Annotate(
              collective::FinishAverage(type, data, total_workers), where));
        }
        if (!in_place) {
          for (absl::Span<std::byte> dst : buffers) {
            std::memcpy(dst.data(), data.data(), bytes);
          }
          copied += 2.0 * buffers.size() * bytes;
        }
      } else {
        // Block r of ShardLayout(elements, daemons) is daemon r's workers'
        // blocks: every block is elements / daemons long.
        STARLING_RETURN_IF_ERROR(
            Annotate(comm_->ReduceScatter(data, type, local_op, call), where));
        for (size_t i = 0; i < rounds.size(); ++i) {
          const size_t offset =
              static_cast<size_t>(first_slot + rounds[i].worker.index) *
              block_bytes;
          absl::Span<std::byte> block = data.subspan(offset, block_bytes);
          if (op == ReduceOp::kAverage) {
            STARLING_RETURN_IF_ERROR(Annotate(
                collective::FinishAverage(type, block, total_workers), where));
          }
          std::memcpy(buffers[i].data() + offset, block.data(), block_bytes);
        }
        copied += 2.0 * bytes / daemons;
      }
      break;
    }
    case proto::CollectiveRequest::KIND_BROADCAST: {
      const int root_daemon = request.root() / local;
      if (root_daemon == comm_->rank() && !in_place) {
        const int root_index = request.root() % local;
        for (size_t i = 0; i < rounds.size(); ++i) {
          if (rounds[i].worker.index == root_index) {
            std::memcpy(data.data(), buffers[i].data(), bytes);
          }
        }
        copied += 2.0 * bytes;
      }
      STARLING_RETURN_IF_ERROR(
          Annotate(comm_->Broadcast(data, type, root_daemon, call), where));
      if (!in_place) {
        for (absl::Span<std::byte> dst : buffers) {
          std::memcpy(dst.data(), data.data(), bytes);
        }
        copied += 2.0 * buffers.size() * bytes;
      }
      break;
    }
    case proto::CollectiveRequest::KIND_ALL_GATHER: {
      for (size_t i = 0; i < rounds.size(); ++i) {
        const size_t offset =
            static_cast<size_t>(first_slot + rounds[i].worker.index) *
            block_bytes;
        std::memcpy(data.data() + offset, buffers[i].data() + offset,
                    block_bytes);
      }
      copied += 2.0 * bytes / daemons;
      STARLING_RETURN_IF_ERROR(
          Annotate(comm_->AllGather(data, type, call), where));
      for (absl::Span<std::byte> dst : buffers) {
        std::memcpy(dst.data(), data.data(), bytes);
      }
      copied += 2.0 * buffers.size() * bytes;
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a collective this daemon runs"));
  }
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->collective_bytes->Increment(static_cast<double>(bytes));
  metrics_->allreduce_staging_copied_bytes->Increment(copied);
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
