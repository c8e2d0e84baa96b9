// Element types and reduction operators of the collectives, and the 16-bit
// float conversions they need.
//
// fp16 (IEEE binary16) and bf16 (bfloat16) are stored as 16-bit values and
// widened to fp32 for arithmetic; narrowing rounds to nearest, ties to even,
// keeps NaN (quieted) and infinities, overflows to infinity and produces fp16
// subnormals. Free functions; thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
#define STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace collective {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };

// kAverage is the sum divided by the group size once, at the end. For
// integers the division truncates toward zero (C++ `/`); integer sums wrap
// modulo 2^bits (two's complement) instead of overflowing.
enum class ReduceOp { kSum, kMin, kMax, kAverage };

// Bytes per element: 4, 8, 2, 2, 4, 8.
size_t DataTypeBytes(DataType type);

// "float32", "float64", "float16", "bfloat16", "int32", "int64".
absl::string_view DataTypeName(DataType type);

// Inverse of DataTypeName; also accepts "fp32", "fp64", "fp16", "bf16".
// InvalidArgument for anything else.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);

// "sum", "min", "max", "average".
absl::string_view ReduceOpName(ReduceOp op);

// Inverse of ReduceOpName ("avg" accepted). InvalidArgument otherwise.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// True for kFloat32, kFloat64, kFloat16, kBFloat16.
bool IsFloatingPoint(DataType type);

// IEEE binary16 <-> float. Widening is exact.
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);

// bfloat16 <-> float. Widening is exact.
float BFloat16ToFloat(uint16_t bf16);
uint16_t FloatToBFloat16(float value);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_DATA_TYPE_H_
