#include "server/collective/data_type.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace collective {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The correctly rounded neighbour of `value` among two candidates `a` < `b`
// (16-bit patterns of the same sign, decoded by `widen`), ties to even.
template <typename Widen>
uint16_t Nearest(double value, uint16_t a, uint16_t b, Widen widen) {
  const double da = std::fabs(value - widen(a));
  const double db = std::fabs(value - widen(b));
  if (da < db) return a;
  if (db < da) return b;
  return (a & 1) == 0 ? a : b;
}

TEST(DataType, SizesNamesAndParsingRoundTrip) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    ASSERT_OK_AND_ASSIGN(DataType parsed, ParseDataType(DataTypeName(t)));
    EXPECT_EQ(parsed, t);
  }
  EXPECT_EQ(DataTypeBytes(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeBytes(DataType::kInt64), 8u);
  EXPECT_THAT(ParseDataType("float128"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                      ReduceOp::kAverage, ReduceOp::kProduct}) {
    ASSERT_OK_AND_ASSIGN(ReduceOp parsed, ParseReduceOp(ReduceOpName(op)));
    EXPECT_EQ(parsed, op);
  }
  EXPECT_THAT(ParseReduceOp("bitwise_and"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DataType, EveryHalfSurvivesARoundTripThroughFloat) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToHalf(f), h) << h;
  }
}

TEST(DataType, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);  // below the tie: stays finite
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // the tie rounds to infinity
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // min subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: even
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Every float rounds to one of its two half neighbours, the nearer one.
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float f = FromBits(state & 0x7FFFFFFFu);
    if (std::isnan(f) || std::fabs(f) >= 65504.0f) continue;
    const uint16_t h = FloatToHalf(f);
    uint16_t lo = h, hi = h;
    if (HalfToFloat(h) > f) lo = static_cast<uint16_t>(h - 1);
    if (HalfToFloat(h) < f) hi = static_cast<uint16_t>(h + 1);
    if (lo == hi) continue;  // exact
    EXPECT_EQ(h, Nearest(f, lo, hi, HalfToFloat)) << "float bits " << Bits(f);
  }
}

TEST(DataType, HalfNaNStaysNaN) {
  EXPECT_TRUE(std::isnan(
      HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(FromBits(0x7F800001u)))));
  EXPECT_TRUE(
      std::isnan(BFloat16ToFloat(FloatToBFloat16(FromBits(0x7F800001u)))));
}

TEST(DataType, FloatToBFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F818000u)), 0x3F82);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7F7FFFFFu)), 0x7F80);  // overflows
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7F80);
  uint32_t state = 777;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float f = FromBits(state & 0x7F7FFFFFu);
    const uint16_t b = FloatToBFloat16(f);
    if (BFloat16ToFloat(b) == f) continue;
    const uint16_t lo = static_cast<uint16_t>(Bits(f) >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    if (hi == 0x7F80) continue;  // rounding to infinity is checked above
    EXPECT_EQ(b, Nearest(f, lo, hi, BFloat16ToFloat)) << Bits(f);
  }
}

// The bulk conversions (F16C where the CPU has it) give the scalar ones'
// values: every half widened, and floats around every rounding case
// narrowed (ties, subnormals, overflow, infinities, odd lengths for the
// tails); a NaN stays a NaN.
TEST(DataTypeTest, BulkConversionsMatchTheScalarOnes) {
  std::vector<uint16_t> halves(65536 + 3);
  for (size_t i = 0; i < halves.size(); ++i) {
    halves[i] = static_cast<uint16_t>(i);
  }
  std::vector<float> wide(halves.size());
  HalfToFloatN(halves.data(), wide.data(), halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    const float scalar = HalfToFloat(halves[i]);
    if (std::isnan(scalar)) {
      EXPECT_TRUE(std::isnan(wide[i])) << i;
    } else {
      EXPECT_EQ(std::memcmp(&scalar, &wide[i], sizeof(float)), 0)
          << "half 0x" << std::hex << halves[i];
    }
  }
  std::vector<float> floats;
  for (float w : wide) {
    if (std::isnan(w)) continue;
    floats.push_back(w);
    floats.push_back(std::nextafter(w, INFINITY));
    floats.push_back(std::nextafter(w, -INFINITY));
  }
  for (float f : {65519.0f, 65520.0f, 65521.0f, 1e-8f, -3e-8f, 2.9802322e-8f,
                  5.9604645e-8f, 1e30f, -1e30f}) {
    floats.push_back(f);
  }
  floats.push_back(0.1f);  // an odd length: a tail after the 8-wide blocks
  std::vector<uint16_t> narrow(floats.size());
  FloatToHalfN(floats.data(), narrow.data(), floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    EXPECT_EQ(narrow[i], FloatToHalf(floats[i])) << floats[i];
  }
  std::vector<uint16_t> b16(floats.size());
  FloatToBFloat16N(floats.data(), b16.data(), floats.size());
  std::vector<float> back(floats.size());
  BFloat16ToFloatN(b16.data(), back.data(), b16.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    EXPECT_EQ(b16[i], FloatToBFloat16(floats[i])) << floats[i];
    EXPECT_EQ(back[i], BFloat16ToFloat(b16[i])) << floats[i];
  }
}

}  // namespace
}  // namespace collective
}  // namespace starling
