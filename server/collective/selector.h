// Selector: picks the algorithm of a collective from its byte size and the
// group size when the caller asks for Algorithm::kAuto.
//
// Defaults (first match wins):
//   group of 1 rank                        -> butterfly (nothing moves)
//   broadcast below tree_max_bytes         -> tree; other broadcasts ->
//                                             butterfly (scatter +
//                                             all-gather)
//   all-reduce below allreduce_tree_max_bytes
//                                          -> tree (reduce to rank 0, then
//                                             broadcast: the fewest
//                                             messages)
//   all-reduce of allreduce_ring_min_bytes and more, other kinds of
//   ring_min_bytes and more                -> ring
//   otherwise                              -> butterfly (for all-reduces
//                                             up to doubling_max_bytes
//                                             recursive doubling: log2 N
//                                             latencies, half the tree's)
// Reduce-broadcast is never chosen automatically: it is the baseline.
//
// Why the ring for large vectors: both move the bandwidth-optimal
// 2(N-1)/N * n bytes per rank, but on TCP the ring keeps one steady stream
// per link while the butterfly switches partners every step, and each new
// stream's first round trips and queueing showed as a wider spread of step
// times (4 hosts at 1 Gbit/s, 1e6 floats: ring median 1.09x the bound,
// butterfly 1.36x with the same minimum; tests/bench/RESULTS.md).
//
// Why the tree for small all-reduces: recursive doubling has half the
// tree's latencies, but every rank sends and wakes at every step, and the
// tree's messages are the fewest. The tree carries the whole vector on each
// of its 2 log2 N hops, though, so it falls behind as the vector grows:
// measured in 3 interleaved sets on 4 and 8 hosts (1 Gbit/s, 2 cores for
// all ranks, with the I/O thread's poll; tests/bench/RESULTS.md run 10) it
// was the fastest (or within the noise of the fastest) up to 40 KB, behind
// the butterfly from 48 KB (4 hosts: 312-333 us against 260-284 us; 8
// hosts, 64 KB: 1.45-1.54 ms against the ring's 0.78-0.93 ms); the
// butterfly led the ring up to 128 KB (1.20-1.27x) and the ring led from
// 160 KB. Before the poll (run 5) the tree had led up to 64 KB. On other
// hosts, measure again: the thresholds are options.
//
// How the thresholds are measured: on the target cluster, for each N and
// each algorithm forced through CallOptions, time AllReduce over sizes
// 4^k bytes with starling-bench --csv --algo all (median of >= 20 timed
// iterations after warm-up) and read the crossovers with
// tests/bench/crossover.py. doubling_max_bytes is where the butterfly's
// recursive doubling stops beating the ring, ring_min_bytes where the ring
// starts beating the butterfly. Every rank of a group must use the same
// thresholds (the op descriptor exchange reports a mismatch otherwise).
// Value type; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_SELECTOR_H_
#define STARLING_SERVER_COLLECTIVE_SELECTOR_H_

#include <cstddef>

#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

struct SelectorOptions {
  // Broadcasts below this many bytes use the binomial tree.
  size_t tree_max_bytes = 16 * 1024;
  // Reduce-scatter and all-gather use the ring from this many bytes on
  // (measured crossover of the all-reduce on 4 hosts at 1 Gbit/s before
  // the I/O thread's poll: 64 KiB).
  size_t ring_min_bytes = 64 * 1024;
  // All-reduces use the ring from this many bytes on (measured crossover
  // with the butterfly on 4 and 8 hosts at 1 Gbit/s: between 128 and 160
  // KB).
  size_t allreduce_ring_min_bytes = 128 * 1024;
  // All-reduces below this many bytes use the tree (measured crossover
  // with the butterfly on 4 and 8 hosts at 1 Gbit/s: between 40 and 48
  // KB). 0 turns it off.
  size_t allreduce_tree_max_bytes = 40 * 1024;
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
