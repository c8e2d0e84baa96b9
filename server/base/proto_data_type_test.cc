#include "server/base/proto_data_type.h"

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace proto {
namespace {

TEST(ProtoDataType, EveryTypeRoundTripsThroughTheWire) {
  for (::starling::DataType t :
       {::starling::DataType::kFloat32, ::starling::DataType::kFloat64,
        ::starling::DataType::kFloat16, ::starling::DataType::kBFloat16,
        ::starling::DataType::kInt32, ::starling::DataType::kInt64}) {
    const DataType wire = DataTypeToProto(t);
    EXPECT_NE(wire, DATA_TYPE_UNSPECIFIED);
    ASSERT_OK_AND_ASSIGN(::starling::DataType back, DataTypeFromProto(wire));
    EXPECT_EQ(back, t);
  }
  EXPECT_EQ(DataTypeToProto(::starling::DataType::kBFloat16),
            DATA_TYPE_BFLOAT16);
}

TEST(ProtoDataType, UnspecifiedAndUnknownWireValuesAreInvalid) {
  EXPECT_THAT(DataTypeFromProto(DATA_TYPE_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DataTypeFromProto(static_cast<DataType>(99)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(DataTypeToProto(static_cast<::starling::DataType>(99)),
            DATA_TYPE_UNSPECIFIED);
}

TEST(ProtoDataType, EveryReduceOpRoundTripsAndUnknownOnesAreInvalid) {
  for (::starling::ReduceOp op :
       {::starling::ReduceOp::kSum, ::starling::ReduceOp::kMin,
        ::starling::ReduceOp::kMax, ::starling::ReduceOp::kAverage,
        ::starling::ReduceOp::kProduct}) {
    const ReduceOp wire = ReduceOpToProto(op);
    EXPECT_NE(wire, REDUCE_OP_UNSPECIFIED);
    ASSERT_OK_AND_ASSIGN(::starling::ReduceOp back, ReduceOpFromProto(wire));
    EXPECT_EQ(back, op);
  }
  EXPECT_EQ(ReduceOpToProto(::starling::ReduceOp::kProduct), REDUCE_OP_PRODUCT);
  EXPECT_THAT(ReduceOpFromProto(REDUCE_OP_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReduceOpFromProto(static_cast<ReduceOp>(42)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace proto
}  // namespace starling
