#include "server/base/flush_denormals.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace starling {
namespace {

// Computed at run time, in the thread's current mode: volatile operands,
// never inlined, and an empty volatile asm (a side effect) so that an
// optimising compiler cannot take the function for a pure one and fold the
// call or move it across the scope's MXCSR writes. Results are compared
// outside the scopes: inside, DAZ makes a comparison treat a subnormal
// operand as zero too.
__attribute__((noinline)) float Times(volatile float a, volatile float b) {
  asm volatile("" ::: "memory");
  return a * b;
}

const float kSubnormal = std::numeric_limits<float>::min() / 4;  // 2.9e-39

TEST(FlushDenormals, SubnormalsAreZeroInsideAndBackAfter) {
  ASSERT_EQ(std::fpclassify(kSubnormal), FP_SUBNORMAL);
  const float normal_product = Times(1e-18f, 1e-18f);  // 1e-36
  float input, result, normal;
  {
    const FlushDenormals flush;
    input = Times(kSubnormal, 1.0f);  // a subnormal input (DAZ)
    result = Times(1e-20f, 1e-20f);   // a subnormal result (FTZ)
    normal = Times(1e-18f, 1e-18f);   // normal: untouched
  }
  EXPECT_EQ(std::fpclassify(input), FP_ZERO);
  EXPECT_EQ(std::fpclassify(result), FP_ZERO);
  EXPECT_EQ(normal, normal_product);
  EXPECT_EQ(std::fpclassify(normal), FP_NORMAL);
  // The mode is back.
  EXPECT_EQ(Times(kSubnormal, 1.0f), kSubnormal);
  EXPECT_EQ(std::fpclassify(Times(1e-20f, 1e-20f)), FP_SUBNORMAL);
}

TEST(FlushDenormals, NestedScopesRestoreInOrder) {
  float inner_result, outer_result;
  {
    const FlushDenormals outer;
    {
      const FlushDenormals inner;
      inner_result = Times(kSubnormal, 1.0f);
    }
    outer_result = Times(kSubnormal, 1.0f);  // still the outer's mode
  }
  EXPECT_EQ(std::fpclassify(inner_result), FP_ZERO);
  EXPECT_EQ(std::fpclassify(outer_result), FP_ZERO);
  EXPECT_EQ(std::fpclassify(Times(kSubnormal, 1.0f)), FP_SUBNORMAL);
}

}  // namespace
}  // namespace starling
