// starling-bench's input pattern and result check, against an fp64
// reference. Rank r's element i is (r + 1) * (1 + i mod 13): small integers,
// so sums over the group are exact in every type up to large groups and the
// expected value of every op has a closed form:
//   all-reduce / reduce-scatter:  sum  N(N+1)/2 * k,  min  k,  max  N * k,
//                                 average  (N+1)/2 * k  (integers: the sum
//                                 divided by N, truncated)
//   all-gather:  element i comes from its owner o: (o + 1) * k
//   broadcast:   the root's values: (root + 1) * k
// with k = 1 + i mod 13. Reduce-scatter checks only this rank's block.
// Integers and fp32/fp64 must match exactly; fp16 and bf16 are stored with
// 11 and 8 significant bits, so they may be off by a rounding per reduction
// step: |got - want| <= (ceil(log2 N) + 1) * 2^-p * |want| (p = 11 or 8).
// Thread-compatible free functions.
#ifndef STARLING_SERVER_BENCH_BENCH_INPUT_H_
#define STARLING_SERVER_BENCH_BENCH_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/types/span.h"
#include "server/bench/bench_report.h"
#include "server/collective/data_type.h"

namespace starling {
namespace bench {

// Fills `data` (elements of `dtype`) with this rank's input for `op`. For
// all-gather only this rank's block is meaningful; for broadcast only the
// root's buffer (others get zeros).
void FillInput(Op op, collective::DataType dtype, absl::Span<std::byte> data,
               int rank, int ranks, int root);

struct CheckOutcome {
  uint64_t wrong = 0;
  std::string first_wrong;  // "element 17: got 12, want 13" when wrong > 0
};

CheckOutcome CheckOutput(Op op, collective::DataType dtype,
                         collective::ReduceOp reduce,
                         absl::Span<const std::byte> data, int rank, int ranks,
                         int root);

}  // namespace bench
}  // namespace starling

#endif  // STARLING_SERVER_BENCH_BENCH_INPUT_H_
