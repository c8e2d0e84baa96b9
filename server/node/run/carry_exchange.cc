#include "server/node/run/carry_exchange.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

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

}  // namespace node
}  // namespace starling
