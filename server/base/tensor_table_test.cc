#include "server/base/tensor_table.h"

#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace proto {
namespace {

using ::testing::HasSubstr;

TensorSpec Spec(const std::string& name, std::vector<int64_t> shape,
                DataType dtype = DATA_TYPE_FLOAT32) {
  TensorSpec spec;
  spec.set_name(name);
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(dtype);
  return spec;
}

TEST(TensorTable, DescribesAndCountsDeclarations) {
  EXPECT_EQ(DescribeSpec(Spec("w", {4, 5})), "[4, 5] float32");
  EXPECT_EQ(DescribeSpec(Spec("s", {}, DATA_TYPE_BFLOAT16)), "[] bfloat16");
  EXPECT_EQ(ElementsOf(Spec("w", {4, 5})), 20u);
  EXPECT_EQ(ElementsOf(Spec("s", {})), 1u);
  EXPECT_EQ(TotalElements({Spec("a", {3}), Spec("b", {2, 2})}), 7u);
}

TEST(TensorTable, EqualTablesCompareOk) {
  const std::vector<TensorSpec> table = {Spec("w", {1000}), Spec("b", {10})};
  EXPECT_OK(CompareTensorTables(table, "rank 0", table, "rank 1"));
  EXPECT_OK(CompareTensorTables({}, "rank 0", {}, "rank 1"));
}

TEST(TensorTable, NamesTheTensorBothDeclarationsAndBothDeclarers) {
  EXPECT_THAT(
      CompareTensorTables({Spec("w", {1000})}, "rank 0", {Spec("w", {999})},
                          "rank 1"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "tensor 'w' declared as [1000] float32 by rank 0 but as [999] "
               "float32 by rank 1"));
  EXPECT_THAT(
      CompareTensorTables({Spec("w", {8})}, "rank 0",
                          {Spec("w", {8}, DATA_TYPE_FLOAT64)}, "rank 2"),
      StatusIs(
          absl::StatusCode::kInvalidArgument,
          HasSubstr("[8] float32 by rank 0 but as [8] float64 by rank 2")));
  EXPECT_THAT(CompareTensorTables({Spec("w", {8})}, "rank 0",
                                  {Spec("w", {8}), Spec("b", {2})}, "rank 1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'b' declared as [2] float32 by rank 1 but not "
                       "declared by rank 0"));
  EXPECT_THAT(
      CompareTensorTables({Spec("w", {8}), Spec("b", {2})}, "rank 0",
                          {Spec("b", {2}), Spec("w", {8})}, "rank 3"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("declaration 0 is tensor 'w' on rank 0 but tensor "
                         "'b' on rank 3")));
}

TEST(TensorTable, ChecksEachSpecAndTheTable) {
  EXPECT_OK(CheckTensorSpecs({Spec("w", {4, 5}), Spec("b", {0})}));
  EXPECT_THAT(
      CheckTensorSpec(Spec("", {1})),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty name")));
  EXPECT_THAT(CheckTensorSpec(Spec("w", {2, -1})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'w': negative dimension in [2, -1] float32"));
  EXPECT_THAT(CheckTensorSpec(Spec("w", {1}, DATA_TYPE_UNSPECIFIED)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'w' has no dtype")));
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(CheckTensorSpec(Spec("huge", {big, big})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 2^64 elements")));
  EXPECT_THAT(CheckTensorSpecs({Spec("w", {1}), Spec("w", {1})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'w' is declared twice"));
  EXPECT_THAT(
      CheckTensorSpecs({Spec("a", {big}), Spec("b", {big}), Spec("c", {big})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("together")));
}

// Buckets fill from the last tensor (backward's first gradients) and close
// before a tensor that would overflow them; a big tensor gets its own.
TEST(TensorTableTest, BucketsFillFromTheLastTensorUpToTheirSize) {
  // The MLP's tensors: fc1 784x256, fc2 256x128, fc3 128x10 and biases.
  std::vector<TensorSpec> mlp = {
      Spec("fc1.weight", {256, 784}), Spec("fc1.bias", {256}),
      Spec("fc2.weight", {128, 256}), Spec("fc2.bias", {128}),
      Spec("fc3.weight", {10, 128}),  Spec("fc3.bias", {10})};
  EXPECT_EQ(AssignBuckets(256 << 10, &mlp), 2);
  std::vector<int> buckets;
  for (const TensorSpec& spec : mlp) buckets.push_back(spec.bucket());
  EXPECT_EQ(buckets, (std::vector<int>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(DescribeSpec(mlp[0]), "[256, 784] float32 bucket 1");
  // 0: one bucket; a size below every tensor: one bucket per tensor.
  EXPECT_EQ(AssignBuckets(0, &mlp), 1);
  EXPECT_EQ(mlp[0].bucket(), 0);
  EXPECT_EQ(AssignBuckets(1, &mlp), 6);
  EXPECT_EQ(mlp[0].bucket(), 5);
  EXPECT_EQ(mlp[5].bucket(), 0);
  // 16-bit tensors count their own bytes: twice as many fit.
  std::vector<TensorSpec> half = {Spec("a", {1000}, DATA_TYPE_FLOAT16),
                                  Spec("b", {1000}, DATA_TYPE_FLOAT16)};
  EXPECT_EQ(AssignBuckets(4000, &half), 1);
  std::vector<TensorSpec> full = {Spec("a", {1000}), Spec("b", {1000})};
  EXPECT_EQ(AssignBuckets(4000, &full), 2);
  std::vector<TensorSpec> none;
  EXPECT_EQ(AssignBuckets(4000, &none), 0);
}

}  // namespace
}  // namespace proto
}  // namespace starling
