#include "server/shard/tensor_table.h"

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/data_type.h"

namespace starling {
namespace shard {
namespace {

using ::testing::HasSubstr;

TensorSpec Spec(std::string name, std::vector<int64_t> shape) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.shape = std::move(shape);
  return spec;
}

std::vector<TensorSpec> Mlp(int64_t hidden) {
  return {Spec("fc1.weight", {784, hidden}), Spec("fc1.bias", {hidden}),
          Spec("fc2.weight", {hidden, 10}), Spec("fc2.bias", {10})};
}

TEST(TensorTable, LaysTensorsOutBackToBackInDeclarationOrder) {
  ASSERT_OK_AND_ASSIGN(TensorTable table, TensorTable::Create(Mlp(128)));
  ASSERT_EQ(table.num_tensors(), 4u);
  const std::vector<TensorEntry>& t = table.tensors();
  EXPECT_EQ(t[0].spec.name, "fc1.weight");
  EXPECT_EQ(t[0].offset, 0u);
  EXPECT_EQ(t[0].count, 784u * 128u);
  EXPECT_EQ(t[1].offset, 784u * 128u);
  EXPECT_EQ(t[1].count, 128u);
  EXPECT_EQ(t[2].offset, 784u * 128u + 128u);
  EXPECT_EQ(t[2].count, 1280u);
  EXPECT_EQ(t[3].offset, 784u * 128u + 128u + 1280u);
  EXPECT_EQ(t[3].count, 10u);
  EXPECT_EQ(table.total_elements(), 784u * 128u + 128u + 1280u + 10u);
  EXPECT_EQ(table.total_bytes(), table.total_elements() * 4u);
}

TEST(TensorTable, ScalarHasOneElementAndEmptyTableIsValid) {
  ASSERT_OK_AND_ASSIGN(
      TensorTable table,
      TensorTable::Create({Spec("scale", {}), Spec("b", {3})}));
  EXPECT_EQ(table.tensors()[0].count, 1u);
  EXPECT_EQ(table.tensors()[1].offset, 1u);
  EXPECT_EQ(table.total_elements(), 4u);
  ASSERT_OK_AND_ASSIGN(TensorTable empty, TensorTable::Create({}));
  EXPECT_EQ(empty.total_elements(), 0u);
  EXPECT_EQ(empty.num_tensors(), 0u);
}

TEST(TensorTable, FindsTensorsByNameAndSlicesTheFlatVector) {
  ASSERT_OK_AND_ASSIGN(TensorTable table, TensorTable::Create(Mlp(4)));
  const TensorEntry* bias = table.Find("fc1.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->offset, 784u * 4u);
  EXPECT_EQ(table.Find("fc3.bias"), nullptr);

  std::vector<float> flat(table.total_elements());
  ASSERT_OK_AND_ASSIGN(absl::Span<float> view,
                       table.TensorIn(absl::MakeSpan(flat), "fc2.bias"));
  EXPECT_EQ(view.data(), flat.data() + flat.size() - 10);
  EXPECT_EQ(view.size(), 10u);
  EXPECT_THAT(table.TensorIn(absl::MakeSpan(flat), "nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  std::vector<float> short_flat(3);
  EXPECT_THAT(table.TensorIn(absl::MakeSpan(short_flat), "fc2.bias"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds 3 elements")));
}

TEST(TensorTable, RejectsEmptyName) {
  EXPECT_THAT(TensorTable::Create({Spec("a", {2}), Spec("", {3})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor #1 has an empty name"));
}

TEST(TensorTable, RejectsDuplicateName) {
  EXPECT_THAT(
      TensorTable::Create({Spec("w", {2}), Spec("b", {2}), Spec("w", {3})}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "tensor 'w' declared twice (#0 and #2)"));
}

TEST(TensorTable, RejectsNonPositiveDimensions) {
  EXPECT_THAT(TensorTable::Create({Spec("w", {3, 0})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'w': dimension 1 of shape [3, 0] is 0; "
                       "dimensions must be >= 1"));
  EXPECT_THAT(TensorTable::Create({Spec("w", {-2})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dimension 0 of shape [-2] is -2")));
}

TEST(TensorTable, RejectsDtypesOtherThanFloat32) {
  TensorSpec half = Spec("emb", {10, 4});
  half.dtype = collective::DataType::kFloat16;
  EXPECT_THAT(TensorTable::Create({Spec("w", {2}), half}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'emb': dtype float16 not supported; "
                       "parameters are float32"));
}

TEST(TensorTable, RejectsShapesThatOverflow) {
  // One tensor whose product wraps int64.
  EXPECT_THAT(
      TensorTable::Create({Spec("huge", {int64_t{1} << 32, int64_t{1} << 32})}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'huge': shape [4294967296, 4294967296] "
                         "overflows")));
  // A single dimension above the byte limit.
  EXPECT_THAT(
      TensorTable::Create({Spec("long", {INT64_MAX})}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor 'long'")));
  // Each tensor fits; their sum does not.
  const int64_t half = static_cast<int64_t>(TensorTable::kMaxTotalElements / 2);
  EXPECT_THAT(TensorTable::Create(
                  {Spec("a", {half}), Spec("b", {half}), Spec("c", {half})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'c': shape")));
  EXPECT_THAT(TensorTable::Create(
                  {Spec("a", {half}), Spec("b", {half}), Spec("c", {half})}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overflows the flat parameter vector")));
}

TEST(TensorTable, ShapeToStringFormatsDimensions) {
  EXPECT_EQ(ShapeToString({784, 128}), "[784, 128]");
  EXPECT_EQ(ShapeToString({7}), "[7]");
  EXPECT_EQ(ShapeToString({}), "[]");
}

TEST(TensorTableCompatible, AcceptsTheSameDeclaration) {
  ASSERT_OK_AND_ASSIGN(TensorTable a, TensorTable::Create(Mlp(128)));
  ASSERT_OK_AND_ASSIGN(TensorTable b, TensorTable::Create(Mlp(128)));
  EXPECT_OK(a.Compatible(b, "rank 2"));
  EXPECT_OK(b.Compatible(a, "worker 0"));
}

TEST(TensorTableCompatible, NamesTheFirstTensorWithADifferentShape) {
  ASSERT_OK_AND_ASSIGN(TensorTable here, TensorTable::Create(Mlp(128)));
  ASSERT_OK_AND_ASSIGN(TensorTable there, TensorTable::Create(Mlp(64)));
  EXPECT_THAT(here.Compatible(there, "rank 2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'fc1.weight': shape [784, 128] float32 here, "
                       "[784, 64] float32 on rank 2"));
}

TEST(TensorTableCompatible, ReportsARenamedOrReorderedTensor) {
  ASSERT_OK_AND_ASSIGN(TensorTable here, TensorTable::Create(Mlp(8)));
  std::vector<TensorSpec> swapped = Mlp(8);
  std::swap(swapped[2], swapped[3]);
  ASSERT_OK_AND_ASSIGN(TensorTable there, TensorTable::Create(swapped));
  EXPECT_THAT(here.Compatible(there, "worker 5"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor #2: 'fc2.weight' here, 'fc2.bias' on worker 5"));
}

TEST(TensorTableCompatible, ReportsMissingAndExtraTensors) {
  ASSERT_OK_AND_ASSIGN(TensorTable full, TensorTable::Create(Mlp(8)));
  std::vector<TensorSpec> fewer = Mlp(8);
  fewer.pop_back();
  ASSERT_OK_AND_ASSIGN(TensorTable partial, TensorTable::Create(fewer));
  EXPECT_THAT(full.Compatible(partial, "rank 1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'fc2.bias' (#3): declared here, missing on "
                       "rank 1 (4 tensors here, 3 on rank 1)"));
  EXPECT_THAT(partial.Compatible(full, "rank 1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tensor 'fc2.bias' (#3): declared on rank 1, missing "
                       "here (3 tensors here, 4 on rank 1)"));
}

}  // namespace
}  // namespace shard
}  // namespace starling
