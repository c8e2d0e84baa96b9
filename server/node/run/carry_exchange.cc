#include "server/node/run/carry_exchange.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/base/secure_random.h"
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

HeldStates StatesOf(Run* carried, int rank, int size) {
  HeldStates states;
  if (carried == nullptr) return states;
  states.held = {carried, rank, size};
  for (Run* r = carried; r->successor != nullptr; r = r->successor.get()) {
    if (states.unconfirmed.run != nullptr) states.held = states.unconfirmed;
    states.unconfirmed = {r->successor.get(), r->successor_rank,
                          r->successor_size};
  }
  return states;
}

absl::Status ConfirmMoved(Run* mine, std::shared_ptr<Run> run,
                          collective::Communicator* comm,
                          const collective::CallOptions& call) {
  const absl::Status confirmed =
      ExchangeRows({1}, comm, call,
                   absl::StrCat("confirming that run ", run->id,
                                "'s state reached every daemon"))
          .status();
  if (confirmed.ok()) return confirmed;
  if (mine != nullptr) {
    mine->successor = std::move(run);
    mine->successor_rank = comm->rank();
    mine->successor_size = comm->size();
  }
  return Annotate(confirmed,
                  mine != nullptr
                      ? "the state moved here; it is kept beside the state it "
                        "came from until the group re-forms"
                      : "the state moved here; this daemon joins again when "
                        "the group re-forms");
}

absl::StatusOr<std::vector<int64_t>> ExchangeHeldRows(
    const std::vector<int64_t>& held, const std::vector<int64_t>& unconfirmed,
    collective::Communicator* comm, const collective::CallOptions& call,
    const std::string& what, uint64_t* state_id) {
  std::vector<int64_t> row = held;
  row.insert(row.end(), unconfirmed.begin(), unconfirmed.end());
  STARLING_ASSIGN_OR_RETURN(const uint64_t nonce,
                            SecureRandom64("the id of an exchange of state"));
  row.push_back(static_cast<int64_t>(nonce & ((uint64_t{1} << 62) - 1)));
  STARLING_ASSIGN_OR_RETURN(const std::vector<int64_t> table,
                            ExchangeRows(row, comm, call, what));
  const size_t width = row.size() - 1;
  std::vector<int64_t> rows;
  uint64_t id = 0;
  for (int r = 0; r < comm->size(); ++r) {
    const auto begin = table.begin() + static_cast<ptrdiff_t>(r * row.size());
    rows.insert(rows.end(), begin, begin + static_cast<ptrdiff_t>(width));
    id = id * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(begin[width]);
  }
  // 0 is a run begun in its group; an id stays below 2^62 (it travels as
  // an int64).
  id &= (uint64_t{1} << 62) - 1;
  *state_id = id == 0 ? 1 : id;
  return rows;
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
