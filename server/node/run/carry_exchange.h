// What the engines' continuations (sync/continuation.h, ps/ps_continuation.h)
// share when a run goes on in a re-formed group: every daemon's account as
// a row of small integers, and the run's tensor table sent to the daemons
// that join it (they carry no state), each one all-reduce on the new
// group's communicator; and the layout of the state they move: one buffer
// of the whole flat vector, then each optimizer state slot's whole vector.
//
// Free functions of their arguments: thread-compatible; they block in
// collectives bounded by `call`.
#ifndef STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
#define STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/run.h"
#include "server/node/run/run_factory.h"

namespace starling {
namespace node {

// Every rank's `row` (as many values on every rank), in rank order: each
// rank fills its own row of a table of zeros, summed by one all-reduce.
// The collective's error, annotated with `what`.
absl::StatusOr<std::vector<int64_t>> ExchangeRows(
    const std::vector<int64_t>& row, collective::Communicator* comm,
    const collective::CallOptions& call, const std::string& what);

// The run's tensors in declaration order.
proto::TensorTable TableOf(const Run& run);

// The run's tensors on every daemon: from `old` (this daemon's state of the
// run; null where it joins) when no daemon joins, otherwise sent by rank
// `source` of the new group (a daemon that carries the run) as the
// table's `table_bytes` bytes in 8-byte words, written into zeros and
// summed. DataLoss when what arrived does not parse.
absl::StatusOr<std::vector<proto::TensorSpec>> ShareTable(
    const Run* old, bool anyone_joins, int source, int64_t table_bytes,
    uint64_t run_id, collective::Communicator* comm,
    const collective::CallOptions& call);

// Slots of optimizer state per element of the run's optimizer, alike on
// every daemon (asked of an optimizer of one element: a shard may be
// empty).
absl::StatusOr<int> StateSlots(const RunFactoryOptions& options);

// A shard's place in the moved state: `ranges` [begin, end) of the flat
// vector, part k at `offsets[k]` of the shard's own values (and of each
// state slot, `values.size()` long).
using ShardRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// Writes a shard's `values` and optimizer `state` (slot by slot) into
// `full`, the moved state of `elements` parameters and `slots` state slots.
void WriteShardState(const ShardRanges& ranges,
                     const std::vector<uint64_t>& offsets,
                     absl::Span<const float> values,
                     absl::Span<const float> state, int slots,
                     uint64_t elements, std::vector<float>& full);

// Reads a shard's values and its state (`*state`, slot by slot) out of
// `full`.
void ReadShardState(const ShardRanges& ranges,
                    const std::vector<uint64_t>& offsets,
                    const std::vector<float>& full, int slots,
                    uint64_t elements, absl::Span<float> values,
                    std::vector<float>* state);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
