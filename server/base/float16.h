// The 16-bit float conversions every part of Starling shares (the
// collectives, the daemon's data path, the client): fp16 (IEEE binary16)
// and bf16 (bfloat16) are stored as 16-bit values and widened to fp32 for
// arithmetic; narrowing rounds to nearest, ties to even, keeps NaN
// (quieted) and infinities, overflows to infinity and produces fp16
// subnormals. Free functions; thread-safe.
#ifndef STARLING_SERVER_BASE_FLOAT16_H_
#define STARLING_SERVER_BASE_FLOAT16_H_

#include <cstddef>
#include <cstdint>

#include "server/base/data_type.h"

namespace starling {

// IEEE binary16 <-> float. Widening is exact.
float HalfToFloat(uint16_t half);
uint16_t FloatToHalf(float value);

// bfloat16 <-> float. Widening is exact.
float BFloat16ToFloat(uint16_t bf16);
uint16_t FloatToBFloat16(float value);

// The same conversions over n elements (the ...N names), `to[i] =
// f(from[i])` (the float16 ones use the CPU's F16C instructions, 8 at a
// time, where it has them and STARLING_PORTABLE_KERNELS does not turn them
// off: the same values for every finite input, infinities and zeros; a NaN
// stays a NaN). `from` and `to` must not overlap.
void HalfToFloatN(const uint16_t* from, float* to, size_t n);
void FloatToHalfN(const float* from, uint16_t* to, size_t n);
void BFloat16ToFloatN(const uint16_t* from, float* to, size_t n);
void FloatToBFloat16N(const float* from, uint16_t* to, size_t n);

// n elements of `type` (float32, float16 or bfloat16) at `from` as float32
// into `to` (a copy for float32), and back. REQUIRES: one of those types;
// no overlap.
void ToFloat32(DataType type, const void* from, float* to, size_t n);
void FromFloat32(DataType type, const float* from, void* to, size_t n);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_FLOAT16_H_
