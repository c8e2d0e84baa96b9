// Element-wise reduction kernels: inout[i] = op(inout[i], in[i]).
//
// The loops are plain and branch-free so that the compiler vectorizes them
// (the library builds with -O2 -ftree-vectorize); float32 sum is the hot loop
// of every all-reduce. fp16/bf16 are widened to fp32, combined and rounded
// back (round-to-nearest-even) per call, so a value reduced over k hops is
// rounded k times. Integer sums and products wrap modulo 2^bits. Min/max of a
// NaN follow the comparison `in < inout` and are unspecified. Buffers need no
// alignment (misaligned ones take a slower copying path). Free functions;
// thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_REDUCE_KERNELS_H_
#define STARLING_SERVER_COLLECTIVE_REDUCE_KERNELS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/collective/data_type.h"

namespace starling {
namespace collective {

// inout[i] = op(inout[i], in[i]) for every element. kAverage sums here; call
// FinishAverage() once on the final sum.
// InvalidArgument if the spans differ in length or the length is not a
// multiple of the element size.
absl::Status Reduce(DataType type, ReduceOp op, absl::Span<std::byte> inout,
                    absl::Span<const std::byte> in);

// out[i] = in[0][i] op in[1][i] op ... op in[k-1][i], combined left to
// right in the order of `in`: the values of copying in[0] into `out` and
// then calling Reduce(type, op, out, in[j]) for j = 1 .. k-1, in one pass
// over memory (`out` is made block by block, each block staying in cache
// while every input is combined into it: k reads and one write per element
// instead of 2k - 1 reads and k writes). kAverage sums, as Reduce().
// REQUIRES: `out` overlaps no input (inputs may overlap each other).
// InvalidArgument if `in` is empty, an input's length differs from out's,
// or the length is not a multiple of the element size.
absl::Status ReduceMany(DataType type, ReduceOp op, absl::Span<std::byte> out,
                        absl::Span<const absl::Span<const std::byte>> in);

// data[i] /= group_size (integers truncate toward zero). InvalidArgument if
// group_size < 1 or the length is not a multiple of the element size.
absl::Status FinishAverage(DataType type, absl::Span<std::byte> data,
                           int group_size);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_REDUCE_KERNELS_H_
