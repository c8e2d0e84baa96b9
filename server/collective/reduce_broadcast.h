// Root-centred collectives, the baseline the butterfly is measured against:
// every rank sends its whole vector to rank 0, rank 0 reduces and sends the
// result to every rank. Rank 0's link carries 2(N-1) * n, so the time grows
// linearly with N. Chunks are pipelined: rank 0 sends result chunk k as soon
// as it has reduced chunk k from every rank. Rank 0 needs (N-1) * n bytes of
// scratch. Free functions; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_REDUCE_BROADCAST_H_
#define STARLING_SERVER_COLLECTIVE_REDUCE_BROADCAST_H_

#include <cstddef>

#include "absl/status/status.h"
#include "server/collective/op_context.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

// Scratch bytes on `rank` (non-zero only on rank 0).
size_t ReduceBroadcastScratchBytes(OpKind kind, size_t count,
                                   size_t element_bytes, int size, int rank);

absl::Status ReduceBroadcastAllReduce(OpContext* ctx);
// Reduce-scatter as a full all-reduce.
absl::Status ReduceBroadcastReduceScatter(OpContext* ctx);
// Every rank writes its block to rank 0, which sends everything to all.
absl::Status ReduceBroadcastAllGather(OpContext* ctx);
// The root writes the whole vector to every rank.
absl::Status ReduceBroadcastBroadcast(OpContext* ctx);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_REDUCE_BROADCAST_H_
