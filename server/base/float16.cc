#include "server/base/float16.h"

#include <cstddef>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "server/base/cpu_features.h"

namespace starling {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return BitsToFloat(FloatBits(magnitude) | sign);
  }
  if (exponent == 0x1F) {
    return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  }
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) {  // Inf or NaN; NaN keeps its top payload.
    if (magnitude == 0x7F800000u) return sign | 0x7C00u;
    return sign | 0x7E00u | static_cast<uint16_t>((magnitude >> 13) & 0x3FFu);
  }
  // 65520 (0x477FF000) is halfway between 65504, the largest half, and the
  // next binade; ties to even round it (and anything above) to infinity.
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;
  if (magnitude < 0x38800000u) {  // below 2^-14: half subnormal or zero
    // 2^-25 (0x33000000) is the tie between 0 and the smallest subnormal.
    if (magnitude <= 0x33000000u) return sign;
    const uint32_t exponent = magnitude >> 23;
    const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    // value = mantissa * 2^(exponent-150); in units of 2^-24 that is
    // mantissa >> (126 - exponent).
    const uint32_t shift = 126 - exponent;
    uint32_t units = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (units & 1u))) ++units;
    return sign | static_cast<uint16_t>(units);
  }
  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits. A
  // carry out of the mantissa correctly bumps the exponent.
  uint32_t half = (magnitude - 0x38000000u) >> 13;
  const uint32_t rest = magnitude & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float BFloat16ToFloat(uint16_t bf16) {
  return BitsToFloat(static_cast<uint32_t>(bf16) << 16);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign, make quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even; overflow carries into infinity as it should.
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

namespace {

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) size_t HalfToFloatF16c(const uint16_t* from,
                                                           float* to,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i));
    _mm256_storeu_ps(to + i, _mm256_cvtph_ps(h));
  }
  return i;
}

__attribute__((target("avx,f16c"))) size_t FloatToHalfF16c(const float* from,
                                                           uint16_t* to,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(from + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(to + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT));
  }
  return i;
}
#endif

}  // namespace

void HalfToFloatN(const uint16_t* from, float* to, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  if (CpuFeaturesInUse().f16c) i = HalfToFloatF16c(from, to, n);
#endif
  for (; i < n; ++i) to[i] = HalfToFloat(from[i]);
}

void FloatToHalfN(const float* from, uint16_t* to, size_t n) {
  size_t i = 0;
#if defined(__x86_64__)
  if (CpuFeaturesInUse().f16c) i = FloatToHalfF16c(from, to, n);
#endif
  for (; i < n; ++i) to[i] = FloatToHalf(from[i]);
}

void BFloat16ToFloatN(const uint16_t* from, float* to, size_t n) {
  for (size_t i = 0; i < n; ++i) to[i] = BFloat16ToFloat(from[i]);
}

void FloatToBFloat16N(const float* from, uint16_t* to, size_t n) {
  for (size_t i = 0; i < n; ++i) to[i] = FloatToBFloat16(from[i]);
}

void ToFloat32(DataType type, const void* from, float* to, size_t n) {
  const auto* bits = static_cast<const uint16_t*>(from);
  switch (type) {
    case DataType::kFloat16:
      HalfToFloatN(bits, to, n);
      return;
    case DataType::kBFloat16:
      BFloat16ToFloatN(bits, to, n);
      return;
    default:
      std::memcpy(to, from, n * sizeof(float));
  }
}

void FromFloat32(DataType type, const float* from, void* to, size_t n) {
  auto* bits = static_cast<uint16_t*>(to);
  switch (type) {
    case DataType::kFloat16:
      FloatToHalfN(from, bits, n);
      return;
    case DataType::kBFloat16:
      FloatToBFloat16N(from, bits, n);
      return;
    default:
      std::memcpy(to, from, n * sizeof(float));
  }
}

}  // namespace starling
