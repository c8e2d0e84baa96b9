// Element types and reduction operators of the collectives, and the 16-bit
// float conversions they need. The element types are server/base's
// DataType, named here so collective code can say collective::DataType.
//
// fp16 (IEEE binary16) and bf16 (bfloat16) are stored as 16-bit values and
// widened to fp32 for arithmetic; narrowing rounds to nearest, ties to even,
// keeps NaN (quieted) and infinities, overflows to infinity and produces fp16
// subnormals. Free functions; thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
#define STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/data_type.h"

namespace starling {
namespace collective {

// The one definition, with its sizes, names, parsing and kinds, lives in
// server/base/data_type.h.
using ::starling::DataType;
using ::starling::DataTypeBytes;
using ::starling::DataTypeName;
using ::starling::IsFloatingPoint;
using ::starling::ParseDataType;

// kAverage is the sum divided by the group size once, at the end. For
// integers the division truncates toward zero (C++ `/`); integer sums wrap
// modulo 2^bits (two's complement) instead of overflowing.
enum class ReduceOp { kSum, kMin, kMax, kAverage };

// "sum", "min", "max", "average".
absl::string_view ReduceOpName(ReduceOp op);

// Inverse of ReduceOpName ("avg" accepted). InvalidArgument otherwise.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// IEEE binary16 <-> float. Widening is exact.
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);

// bfloat16 <-> float. Widening is exact.
float BFloat16ToFloat(uint16_t bf16);
uint16_t FloatToBFloat16(float value);

// The same conversions over n elements (the ...N names), `to[i] =
// f(from[i])` (the float16
// ones use the CPU's F16C instructions, 8 at a time, where it has them:
// the same values for every finite input, infinities and zeros; a NaN stays
// a NaN). `from` and `to` must not overlap.
void HalfToFloatN(const uint16_t* from, float* to, size_t n);
void FloatToHalfN(const float* from, uint16_t* to, size_t n);
void BFloat16ToFloatN(const uint16_t* from, float* to, size_t n);
void FloatToBFloat16N(const float* from, uint16_t* to, size_t n);

// n elements of `type` (float32, float16 or bfloat16) at `from` as float32
// into `to` (a copy for float32), and back. REQUIRES: one of those types;
// no overlap.
void ToFloat32(DataType type, const void* from, float* to, size_t n);
void FromFloat32(DataType type, const float* from, void* to, size_t n);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
