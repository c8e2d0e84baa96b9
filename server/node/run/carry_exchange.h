// What the engines' continuations (sync/continuation.h, ps/ps_continuation.h)
// share when a run goes on in a re-formed group: every daemon's account as
// a row of small integers, and the run's tensor table sent to the daemons
// that join it (they carry no state). Both are one all-reduce on the new
// group's communicator.
//
// Free functions of their arguments: thread-compatible; they block in
// collectives bounded by `call`.
#ifndef STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
#define STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/run.h"

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

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
