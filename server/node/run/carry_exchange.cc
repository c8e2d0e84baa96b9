#include "server/node/run/carry_exchange.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/collective/data_type.h"

namespace starling {
namespace node {

using collective::DataType;

absl::StatusOr<std::vector<int64_t>> ExchangeRows(
    const std::vector<int64_t>& row, collective::Communicator* comm,
    const collective::CallOptions& call, const std::string& what) {
  std::vector<int64_t> table(static_cast<size_t>(comm->size()) * row.size(), 0);
  std::copy(row.begin(), row.end(),
            table.begin() + static_cast<size_t>(comm->rank()) * row.size());
  STARLING_RETURN_IF_ERROR(Annotate(
      comm->AllReduce(
          absl::Span<std::byte>(reinterpret_cast<std::byte*>(table.data()),
                                table.size() * sizeof(int64_t)),
          DataType::kInt64, collective::ReduceOp::kSum, call),
      what));
  return table;
}

proto::TensorTable TableOf(const Run& run) {
  proto::TensorTable table;
  for (const TensorLayout::Entry& entry : run.layout.tensors) {
    *table.add_tensors() = entry.spec;
  }
  return table;
}

absl::StatusOr<std::vector<proto::TensorSpec>> ShareTable(
    const Run* old, bool anyone_joins, int source, int64_t table_bytes,
    uint64_t run_id, collective::Communicator* comm,
    const collective::CallOptions& call) {
  proto::TensorTable table;
  if (!anyone_joins) {
    table = TableOf(*old);
  } else {
    std::vector<int64_t> words((static_cast<size_t>(table_bytes) + 7) / 8, 0);
    if (comm->rank() == source) {
      const std::string mine = TableOf(*old).SerializeAsString();
      std::memcpy(words.data(), mine.data(),
                  std::min<size_t>(mine.size(), words.size() * 8));
    }
    STARLING_RETURN_IF_ERROR(Annotate(
        comm->AllReduce(
            absl::Span<std::byte>(reinterpret_cast<std::byte*>(words.data()),
                                  words.size() * sizeof(int64_t)),
            DataType::kInt64, collective::ReduceOp::kSum, call),
        absl::StrCat("sending run ", run_id, "'s tensor table from rank ",
                     source, " to the daemons that join it")));
    if (!table.ParseFromArray(words.data(), static_cast<int>(table_bytes))) {
      return absl::DataLossError(absl::StrCat(
          "run ", run_id, "'s tensor table of ", table_bytes,
          " bytes from rank ", source, " of the new group does not parse"));
    }
  }
  return std::vector<proto::TensorSpec>(table.tensors().begin(),
                                        table.tensors().end());
}

absl::StatusOr<int> StateSlots(const RunFactoryOptions& options) {
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<shard::Optimizer> one,
                            CreateRunOptimizer(options, 1, 1));
  return static_cast<int>(one->state().size());
}

void WriteShardState(const ShardRanges& ranges,
                     const std::vector<uint64_t>& offsets,
                     absl::Span<const float> values,
                     absl::Span<const float> state, int slots,
                     uint64_t elements, std::vector<float>& full) {
  const size_t n = values.size();
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [begin, end] = ranges[k];
    const size_t count = end - begin;
    std::memcpy(full.data() + begin, values.data() + offsets[k],
                count * sizeof(float));
    for (int s = 0; s < slots; ++s) {
      std::memcpy(full.data() + (1 + s) * elements + begin,
                  state.data() + s * n + offsets[k], count * sizeof(float));
    }
  }
}

void ReadShardState(const ShardRanges& ranges,
                    const std::vector<uint64_t>& offsets,
                    const std::vector<float>& full, int slots,
                    uint64_t elements, absl::Span<float> values,
                    std::vector<float>* state) {
  const size_t n = values.size();
  state->assign(static_cast<size_t>(slots) * n, 0.0f);
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [begin, end] = ranges[k];
    const size_t count = end - begin;
    std::memcpy(values.data() + offsets[k], full.data() + begin,
                count * sizeof(float));
    for (int s = 0; s < slots; ++s) {
      std::memcpy(state->data() + s * n + offsets[k],
                  full.data() + (1 + s) * elements + begin,
                  count * sizeof(float));
    }
  }
}

}  // namespace node
}  // namespace starling
