// Selector: picks the algorithm of a collective from its byte size and the
// group size when the caller asks for Algorithm::kAuto.
//
// Defaults (first match wins):
//   group of 1 ranks                       -> butterfly (nothing moves)
//   all-reduce below tree_max_bytes        -> butterfly, which below
//                                             doubling_max_bytes is recursive
//                                             doubling: log2 N latencies,
//                                             half the tree's 2 log2 N
//   N a power of two                       -> butterfly
//   N not a power of two, >= ring_min_bytes -> ring (the butterfly's fold
//                                             moves n extra bytes over the
//                                             partner links)
//   otherwise                              -> butterfly
//   broadcast below tree_max_bytes         -> tree; else butterfly (scatter
//                                             + all-gather)
// Reduce-broadcast is never chosen automatically: it is the baseline.
//
// How the thresholds are meant to be measured (the benchmark's job): on the
// target cluster, for each N in {2, 3, 4, 5, 8, 16, ...} and each algorithm
// forced through CallOptions, time AllReduce over sizes 2^k bytes, k = 4..30
// (median of >= 20 iterations after warm-up). tree_max_bytes is the largest
// size at which the tree still beats the butterfly for power-of-two N;
// ring_min_bytes is the smallest size at which the ring beats the butterfly
// for non-power-of-two N. Every rank of a group must use the same thresholds
// (the op descriptor exchange reports a mismatch otherwise).
// Value type; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_SELECTOR_H_
#define STARLING_SERVER_COLLECTIVE_SELECTOR_H_

#include <cstddef>

#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

struct SelectorOptions {
  // All-reduce and broadcast below this many bytes use the binomial tree.
  size_t tree_max_bytes = 16 * 1024;
  // Non-power-of-two groups use the ring from this many bytes on.
  size_t ring_min_bytes = 1024 * 1024;
  // Butterfly all-reduces up to this many bytes exchange the whole vector
  // (recursive doubling, log2 N latencies) instead of halving + doubling
  // (2 log2 N latencies). 0 turns it off.
  size_t doubling_max_bytes = 64 * 1024;
};

// The algorithm for `kind` over `bytes` on `group_size` ranks. Returns
// `requested` unless it is kAuto. Never returns kAuto.
Algorithm SelectAlgorithm(const SelectorOptions& options, OpKind kind,
                          size_t bytes, int group_size,
                          Algorithm requested = Algorithm::kAuto);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_SELECTOR_H_
