// Ring collectives: reduce-scatter and all-gather around the ring
// rank -> rank+1, and all-reduce as the two in sequence. Each of the N-1
// steps moves one ShardLayout block per rank; blocks are cut into chunks and
// pipelined at chunk granularity: as soon as chunk k of the block received
// in step s is reduced, it is forwarded as chunk k of step s+1, while chunk
// k+1 is still arriving. Every rank sends and receives (N-1)/N * n per
// phase, the bandwidth optimum for any N, at the price of N-1 latencies.
//
// In place on OpContext::data() with ShardLayout(count, N) blocks: after
// RingReduceScatter() rank r's block r is reduced; RingAllGather() starts
// from each rank's block r. Free functions; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_RING_H_
#define STARLING_SERVER_COLLECTIVE_RING_H_

#include <cstddef>

#include "absl/status/status.h"
#include "server/collective/op_context.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

// Scratch bytes the ring needs (the same on every rank).
size_t RingScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                        int size);

absl::Status RingAllReduce(OpContext* ctx);
absl::Status RingReduceScatter(OpContext* ctx);
absl::Status RingAllGather(OpContext* ctx);

// Broadcast as scatter from the root then ring all-gather.
absl::Status RingBroadcast(OpContext* ctx);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_RING_H_
