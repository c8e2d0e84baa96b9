#include "server/collective/reduce_kernels.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace collective {
namespace {

template <typename T>
absl::Span<std::byte> Bytes(std::vector<T>& v) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(v.data()),
                        v.size() * sizeof(T));
}

template <typename T>
std::vector<T> Apply(DataType type, ReduceOp op, std::vector<T> a,
                     std::vector<T> b) {
  EXPECT_OK(Reduce(type, op, Bytes(a), Bytes(b)));
  return a;
}

TEST(ReduceKernels, Float32SumMinMax) {
  const std::vector<float> a = {1, -2, 3.5f, 0};
  const std::vector<float> b = {2, 5, -1, 0};
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kSum, a, b),
            (std::vector<float>{3, 3, 2.5f, 0}));
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kMin, a, b),
            (std::vector<float>{1, -2, -1, 0}));
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kMax, a, b),
            (std::vector<float>{2, 5, 3.5f, 0}));
  // kAverage sums; FinishAverage divides.
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kAverage, a, b),
            (std::vector<float>{3, 3, 2.5f, 0}));
}

TEST(ReduceKernels, Float64AndInt64) {
  EXPECT_EQ(
      Apply(DataType::kFloat64, ReduceOp::kSum, std::vector<double>{0.5, 1e300},
            std::vector<double>{0.25, 1e300}),
      (std::vector<double>{0.75, 2e300}));
  EXPECT_EQ(Apply(DataType::kInt64, ReduceOp::kMin, std::vector<int64_t>{-5, 7},
                  std::vector<int64_t>{3, -9}),
            (std::vector<int64_t>{-5, -9}));
}

TEST(ReduceKernels, IntegerSumsWrapInsteadOfOverflowing) {
  const int32_t max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kSum, std::vector<int32_t>{max},
                  std::vector<int32_t>{1}),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kMax, std::vector<int32_t>{-1, 4},
                  std::vector<int32_t>{-3, 9}),
            (std::vector<int32_t>{-1, 9}));
}

TEST(ReduceKernels, ProductsOfEveryTypeIntegersWrapping) {
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kProduct,
                  std::vector<float>{1.5f, -2, 0}, std::vector<float>{4, 3, 7}),
            (std::vector<float>{6, -6, 0}));
  EXPECT_EQ(
      Apply(DataType::kFloat64, ReduceOp::kProduct,
            std::vector<double>{0.5, 1e200}, std::vector<double>{8, 1e200}),
      (std::vector<double>{4, std::numeric_limits<double>::infinity()}));
  // 2^31 wraps to INT32_MIN; -3 * 5 stays exact.
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kProduct,
                  std::vector<int32_t>{1 << 16, -3},
                  std::vector<int32_t>{1 << 15, 5}),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -15}));
  EXPECT_EQ(Apply(DataType::kInt64, ReduceOp::kProduct,
                  std::vector<int64_t>{int64_t{1} << 40, -7},
                  std::vector<int64_t>{int64_t{1} << 30, 6}),
            (std::vector<int64_t>{0, -42}));
  // 16-bit floats: combined in float32 and rounded back.
  std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToBFloat16(3.0f)};
  std::vector<uint16_t> b = {FloatToHalf(-2.0f), FloatToBFloat16(0.5f)};
  std::vector<uint16_t> h = {a[0]}, hb = {b[0]};
  ASSERT_OK(
      Reduce(DataType::kFloat16, ReduceOp::kProduct, Bytes(h), Bytes(hb)));
  EXPECT_EQ(HalfToFloat(h[0]), -3.0f);
  std::vector<uint16_t> f = {a[1]}, fb = {b[1]};
  ASSERT_OK(
      Reduce(DataType::kBFloat16, ReduceOp::kProduct, Bytes(f), Bytes(fb)));
  EXPECT_EQ(BFloat16ToFloat(f[0]), 1.5f);
}

TEST(ReduceKernels, IntegerAverageTruncatesTowardZero) {
  std::vector<int32_t> v = {7, -7, 6};
  ASSERT_OK(FinishAverage(DataType::kInt32, Bytes(v), 2));
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 3}));
  EXPECT_THAT(FinishAverage(DataType::kInt32, Bytes(v), 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ReduceKernels, HalfSumRoundsOnceInFloat32) {
  // 2048 + 1 is not representable in fp16 (spacing 2 there): ties to even.
  std::vector<uint16_t> a = {FloatToHalf(2048), FloatToHalf(2048),
                             FloatToHalf(1), FloatToHalf(65504)};
  std::vector<uint16_t> b = {FloatToHalf(1), FloatToHalf(3), FloatToHalf(2),
                             FloatToHalf(65504)};
  ASSERT_OK(Reduce(DataType::kFloat16, ReduceOp::kSum, Bytes(a), Bytes(b)));
  EXPECT_EQ(HalfToFloat(a[0]), 2048);
  EXPECT_EQ(HalfToFloat(a[1]), 2052);
  EXPECT_EQ(HalfToFloat(a[2]), 3);
  EXPECT_TRUE(std::isinf(HalfToFloat(a[3])));
  std::vector<uint16_t> c = {FloatToHalf(3)};
  ASSERT_OK(FinishAverage(DataType::kFloat16, Bytes(c), 2));
  EXPECT_EQ(HalfToFloat(c[0]), 1.5f);
}

TEST(ReduceKernels, BFloat16MinMaxAndSum) {
  std::vector<uint16_t> a = {FloatToBFloat16(1), FloatToBFloat16(-4)};
  std::vector<uint16_t> b = {FloatToBFloat16(2), FloatToBFloat16(8)};
  std::vector<uint16_t> sum = a;
  ASSERT_OK(Reduce(DataType::kBFloat16, ReduceOp::kSum, Bytes(sum), Bytes(b)));
  EXPECT_EQ(BFloat16ToFloat(sum[0]), 3);
  EXPECT_EQ(BFloat16ToFloat(sum[1]), 4);
  ASSERT_OK(Reduce(DataType::kBFloat16, ReduceOp::kMax, Bytes(a), Bytes(b)));
  EXPECT_EQ(BFloat16ToFloat(a[1]), 8);
}

TEST(ReduceKernels, MisalignedBuffersGiveTheSameResult) {
  std::vector<std::byte> a(4 * 3001 + 1), b(4 * 3001 + 1);
  for (int i = 0; i < 3001; ++i) {
    const float x = i * 0.5f, y = 1.0f;
    std::memcpy(&a[1 + 4 * i], &x, 4);
    std::memcpy(&b[1 + 4 * i], &y, 4);
  }
  ASSERT_OK(Reduce(DataType::kFloat32, ReduceOp::kSum,
                   absl::MakeSpan(a).subspan(1),
                   absl::MakeConstSpan(b).subspan(1)));
  for (int i = 0; i < 3001; ++i) {
    float x;
    std::memcpy(&x, &a[1 + 4 * i], 4);
    ASSERT_EQ(x, i * 0.5f + 1.0f) << i;
  }
}

TEST(ReduceKernels, RejectsMismatchedOrPartialBuffers) {
  std::vector<std::byte> a(8), b(4), c(6);
  EXPECT_THAT(Reduce(DataType::kFloat32, ReduceOp::kSum, absl::MakeSpan(a),
                     absl::MakeConstSpan(b)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Reduce(DataType::kFloat32, ReduceOp::kSum, absl::MakeSpan(c),
                     absl::MakeConstSpan(c)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Values whose float32 sums round differently in every order.
std::vector<float> Values(int seed, size_t n) {
  std::vector<float> v(n);
  uint32_t x = 2654435761u * (seed + 1);
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(x)) * 1e-7f;
  }
  return v;
}

TEST(ReduceKernels, ReduceManyMatchesSuccessiveReduces) {
  // Lengths across the block size (2048 floats), inputs 1 .. 5.
  for (size_t n : {0, 1, 7, 2047, 2048, 2049, 3 * 2048 + 5}) {
    for (int k = 1; k <= 5; ++k) {
      std::vector<std::vector<float>> inputs;
      for (int j = 0; j < k; ++j) inputs.push_back(Values(j, n));
      std::vector<float> expected = inputs[0];
      for (int j = 1; j < k; ++j) {
        ASSERT_OK(Reduce(DataType::kFloat32, ReduceOp::kSum, Bytes(expected),
                         Bytes(inputs[j])));
      }
      std::vector<absl::Span<const std::byte>> in;
      for (std::vector<float>& v : inputs) in.push_back(Bytes(v));
      std::vector<float> out(n, -1.0f);
      ASSERT_OK(ReduceMany(DataType::kFloat32, ReduceOp::kSum, Bytes(out), in));
      ASSERT_EQ(std::memcmp(out.data(), expected.data(), n * sizeof(float)), 0)
          << n << " elements, " << k << " inputs";
    }
  }
}

TEST(ReduceKernels, ReduceManyOtherTypesAndOps) {
  std::vector<uint16_t> a = {FloatToHalf(2048), FloatToHalf(1)};
  std::vector<uint16_t> b = {FloatToHalf(1), FloatToHalf(2)};
  std::vector<uint16_t> c = {FloatToHalf(1), FloatToHalf(4)};
  std::vector<uint16_t> out(2);
  std::vector<absl::Span<const std::byte>> in = {Bytes(a), Bytes(b), Bytes(c)};
  ASSERT_OK(ReduceMany(DataType::kFloat16, ReduceOp::kSum, Bytes(out), in));
  // Rounded after each input, as successive Reduce() calls: 2048 + 1 ties
  // to 2048, twice.
  EXPECT_EQ(HalfToFloat(out[0]), 2048);
  EXPECT_EQ(HalfToFloat(out[1]), 7);
  std::vector<int32_t> x = {5, -1}, y = {3, 9};
  std::vector<int32_t> m(2);
  ASSERT_OK(ReduceMany(DataType::kInt32, ReduceOp::kMax, Bytes(m),
                       {Bytes(x), Bytes(y), Bytes(x)}));
  EXPECT_EQ(m, (std::vector<int32_t>{5, 9}));
}

TEST(ReduceKernels, ReduceManyMisalignedBuffers) {
  const size_t n = 5000;
  std::vector<float> a = Values(1, n), b = Values(2, n);
  std::vector<std::byte> ma(4 * n + 1), mb(4 * n + 3), mout(4 * n + 2);
  std::memcpy(&ma[1], a.data(), 4 * n);
  std::memcpy(&mb[3], b.data(), 4 * n);
  ASSERT_OK(ReduceMany(DataType::kFloat32, ReduceOp::kSum,
                       absl::MakeSpan(mout).subspan(2, 4 * n),
                       {absl::MakeConstSpan(ma).subspan(1),
                        absl::MakeConstSpan(mb).subspan(3)}));
  ASSERT_OK(Reduce(DataType::kFloat32, ReduceOp::kSum, Bytes(a), Bytes(b)));
  EXPECT_EQ(std::memcmp(&mout[2], a.data(), 4 * n), 0);
}

TEST(ReduceKernels, ReduceManyRejectsBadArguments) {
  std::vector<std::byte> a(8), b(4), c(6), d(6);
  EXPECT_THAT(
      ReduceMany(DataType::kFloat32, ReduceOp::kSum, absl::MakeSpan(a), {}),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReduceMany(DataType::kFloat32, ReduceOp::kSum, absl::MakeSpan(a),
                         {absl::MakeConstSpan(a), absl::MakeConstSpan(b)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReduceMany(DataType::kFloat32, ReduceOp::kSum, absl::MakeSpan(c),
                         {absl::MakeConstSpan(d)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// The hot loop of every all-reduce: float32 sum must run at memory speed
// (vectorized), not element by element. 16 MiB per pass; a scalar loop at
// -O0 manages ~1 GB/s, the vectorized one several GB/s. The bound is loose
// so that a loaded CI machine passes.
TEST(ReduceKernels, Float32SumIsFast) {
  const size_t n = 4 << 20;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  ASSERT_OK(Reduce(DataType::kFloat32, ReduceOp::kSum, Bytes(a), Bytes(b)));
  const auto start = std::chrono::steady_clock::now();
  const int passes = 10;
  for (int i = 0; i < passes; ++i) {
    ASSERT_OK(Reduce(DataType::kFloat32, ReduceOp::kSum, Bytes(a), Bytes(b)));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double gbytes_per_s = passes * 3.0 * n * sizeof(float) / seconds / 1e9;
  std::printf("float32 sum: %.2f GB/s (read 2, write 1 streams)\n",
              gbytes_per_s);
  EXPECT_GT(gbytes_per_s, 1.5);
  EXPECT_EQ(a[0], 1.0f + 11 * 2.0f);
}

}  // namespace
}  // namespace collective
}  // namespace starling
