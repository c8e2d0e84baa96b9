// Butterfly collectives (Rabenseifner): reduce-scatter by recursive halving,
// all-gather by recursive doubling, and all-reduce as the two in sequence.
// N ranks that are not a power of two fold: with P the largest power of two
// <= N, rank P+i ("extra") first hands its data to rank i (its "partner"),
// the P ranks run the butterfly, and each partner hands the extra its result
// at the end.
//
// In place on OpContext::data(), ShardLayout(count, N) blocks: after
// ButterflyReduceScatter() rank r's block r holds the reduced values; before
// ButterflyAllGather() rank r's block r holds its contribution, after it
// every rank holds every block. Costs per rank (n = data bytes, P ranks):
// reduce-scatter and all-gather each send and receive (P-1)/P * n in
// log2(P) steps; folding adds n to and from each partner.
//
// All-reduces of 128 KiB and more pipeline the halving and doubling over
// segments (at most 64, each at least 64 KiB, each its own butterfly with
// its own scratch areas and write steps): segment s's step j + 1 leaves as
// soon as its step j is reduced, while the later segments' step j still
// arrives, so no link idles from one step's last chunk to the next step's
// first (tests/bench/RESULTS.md, runs 4 and 10).
//
// Small all-reduces (at most doubling_max_bytes) skip the halving:
// the active ranks exchange the whole vector with partner rank ^ 2^j for
// j = 0..log2(P)-1 and reduce (recursive doubling), which costs log2(P)
// latencies instead of the 2 log2(P) of halving + doubling, while the bytes
// moved (log2(P) * n) still cost little at that size.
// Free functions on one op's context; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_BUTTERFLY_H_
#define STARLING_SERVER_COLLECTIVE_BUTTERFLY_H_

#include <cstddef>

#include "absl/status/status.h"
#include "server/collective/op_context.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

// Scratch bytes the butterfly needs for `kind` over `count` elements of
// `element_bytes` on a group of `size` ranks (the same on every rank).
size_t ButterflyScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                             int size, size_t doubling_max_bytes);

absl::Status ButterflyAllReduce(OpContext* ctx);
absl::Status ButterflyReduceScatter(OpContext* ctx);
absl::Status ButterflyAllGather(OpContext* ctx);

// Broadcast as scatter from `root` (block i to rank i) then all-gather
// (van de Geijn): the root sends about n instead of log2(N) * n.
absl::Status ButterflyBroadcast(OpContext* ctx);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_BUTTERFLY_H_
