#include "server/base/data_type.h"

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

constexpr DataType kAll[] = {DataType::kFloat32, DataType::kFloat64,
                             DataType::kFloat16, DataType::kBFloat16,
                             DataType::kInt32,   DataType::kInt64};

TEST(DataType, NamesParseBackToTheSameType) {
  for (DataType t : kAll) {
    ASSERT_OK_AND_ASSIGN(DataType parsed, ParseDataType(DataTypeName(t)));
    EXPECT_EQ(parsed, t);
  }
}

TEST(DataType, ParsingAcceptsShortSpellingsAndAnyCase) {
  ASSERT_OK_AND_ASSIGN(DataType bf16, ParseDataType("BF16"));
  EXPECT_EQ(bf16, DataType::kBFloat16);
  ASSERT_OK_AND_ASSIGN(DataType fp64, ParseDataType("fp64"));
  EXPECT_EQ(fp64, DataType::kFloat64);
  ASSERT_OK_AND_ASSIGN(DataType i32, ParseDataType("Int32"));
  EXPECT_EQ(i32, DataType::kInt32);
  EXPECT_THAT(ParseDataType("float128"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseDataType(""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DataType, SizesAndKinds) {
  EXPECT_EQ(DataTypeBytes(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeBytes(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeBytes(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeBytes(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeBytes(DataType::kInt32), 4u);
  EXPECT_EQ(DataTypeBytes(DataType::kInt64), 8u);
  EXPECT_TRUE(IsFloatingPoint(DataType::kBFloat16));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt64));
}

TEST(DataType, ValuesOutsideTheEnumAreNamedUnknown) {
  const DataType bad = static_cast<DataType>(99);
  EXPECT_EQ(DataTypeName(bad), "unknown");
  EXPECT_EQ(DataTypeBytes(bad), 0u);
  EXPECT_FALSE(IsFloatingPoint(bad));
}

}  // namespace
}  // namespace starling
