#include "server/bench/bench_input.h"

#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace starling {
namespace bench {
namespace {

using collective::DataType;
using collective::ReduceOp;
using ::testing::HasSubstr;

// Reduces the ranks' inputs element-wise in fp64, as a correct collective
// would, and stores the result in `out` (float32).
std::vector<float> SumOfInputs(int ranks, size_t n) {
  std::vector<double> acc(n, 0);
  std::vector<float> in(n);
  for (int r = 0; r < ranks; ++r) {
    FillInput(Op::kAllReduce, DataType::kFloat32,
              absl::MakeSpan(reinterpret_cast<std::byte*>(in.data()), 4 * n), r,
              ranks, 0);
    for (size_t i = 0; i < n; ++i) acc[i] += in[i];
  }
  return std::vector<float>(acc.begin(), acc.end());
}

absl::Span<const std::byte> Bytes(const std::vector<float>& v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()),
                             4 * v.size());
}

TEST(BenchInput, CorrectSumPassesAndOneWrongElementIsNamed) {
  for (int ranks : {1, 2, 5, 16}) {
    std::vector<float> out = SumOfInputs(ranks, 1000);
    EXPECT_EQ(CheckOutput(Op::kAllReduce, DataType::kFloat32, ReduceOp::kSum,
                          Bytes(out), 0, ranks, 0)
                  .wrong,
              0u);
    out[17] += 1;
    const CheckOutcome bad =
        CheckOutput(Op::kAllReduce, DataType::kFloat32, ReduceOp::kSum,
                    Bytes(out), 0, ranks, 0);
    EXPECT_EQ(bad.wrong, 1u);
    EXPECT_THAT(bad.first_wrong, HasSubstr("element 17"));
  }
}

TEST(BenchInput, ReduceScatterChecksOnlyOwnBlock) {
  const int ranks = 3;
  std::vector<float> out = SumOfInputs(ranks, 10);  // blocks 4, 3, 3
  out[0] = -1;                                      // rank 0's block
  EXPECT_EQ(CheckOutput(Op::kReduceScatter, DataType::kFloat32, ReduceOp::kSum,
                        Bytes(out), 1, ranks, 0)
                .wrong,
            0u);
  EXPECT_EQ(CheckOutput(Op::kReduceScatter, DataType::kFloat32, ReduceOp::kSum,
                        Bytes(out), 0, ranks, 0)
                .wrong,
            1u);
}

TEST(BenchInput, AllGatherExpectsEachOwnersBlock) {
  const int ranks = 4;
  const size_t n = 11;
  std::vector<float> gathered(n, 0), mine(n);
  for (int r = 0; r < ranks; ++r) {
    FillInput(Op::kAllGather, DataType::kFloat32,
              absl::MakeSpan(reinterpret_cast<std::byte*>(mine.data()), 4 * n),
              r, ranks, 0);
    for (size_t i = 0; i < n; ++i) gathered[i] += mine[i];  // others are 0
  }
  EXPECT_EQ(CheckOutput(Op::kAllGather, DataType::kFloat32, ReduceOp::kSum,
                        Bytes(gathered), 2, ranks, 0)
                .wrong,
            0u);
}

TEST(BenchInput, IntegerAverageTruncates) {
  // 4 ranks: sum = 10k, average 2.5k truncated.
  const int ranks = 4;
  std::vector<int32_t> out(13);
  for (size_t i = 0; i < out.size(); ++i) out[i] = (10 * (1 + i % 13)) / 4;
  EXPECT_EQ(CheckOutput(Op::kAllReduce, DataType::kInt32, ReduceOp::kAverage,
                        absl::MakeConstSpan(
                            reinterpret_cast<const std::byte*>(out.data()),
                            4 * out.size()),
                        0, ranks, 0)
                .wrong,
            0u);
}

TEST(BenchInput, BFloat16AllowsOneRoundingPerStep) {
  // 8 ranks: sums up to 36 * 13 = 468, not exact in bf16 (8 bits).
  const int ranks = 8;
  std::vector<uint16_t> out(13);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = collective::FloatToBFloat16(36.0f * (1 + i % 13));
  }
  auto bytes = absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(out.data()), 2 * out.size());
  EXPECT_EQ(CheckOutput(Op::kAllReduce, DataType::kBFloat16, ReduceOp::kSum,
                        bytes, 0, ranks, 0)
                .wrong,
            0u);
  out[12] = collective::FloatToBFloat16(400.0f);  // want 468: far off
  EXPECT_EQ(CheckOutput(Op::kAllReduce, DataType::kBFloat16, ReduceOp::kSum,
                        bytes, 0, ranks, 0)
                .wrong,
            1u);
}

}  // namespace
}  // namespace bench
}  // namespace starling
