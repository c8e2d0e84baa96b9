#include "server/base/proto_data_type.h"

#include <cstddef>

#include "absl/strings/str_cat.h"

namespace starling {
namespace proto {
namespace {

struct WireDataType {
  ::starling::DataType type;
  DataType wire;
};

constexpr WireDataType kWireDataTypes[] = {
    {::starling::DataType::kFloat32, DATA_TYPE_FLOAT32},
    {::starling::DataType::kFloat64, DATA_TYPE_FLOAT64},
    {::starling::DataType::kFloat16, DATA_TYPE_FLOAT16},
    {::starling::DataType::kBFloat16, DATA_TYPE_BFLOAT16},
    {::starling::DataType::kInt32, DATA_TYPE_INT32},
    {::starling::DataType::kInt64, DATA_TYPE_INT64},
};
static_assert(sizeof(kWireDataTypes) / sizeof(kWireDataTypes[0]) ==
                  static_cast<size_t>(::starling::DataType::kInt64) + 1,
              "every DataType needs a wire value");

struct WireReduceOp {
  ::starling::ReduceOp op;
  ReduceOp wire;
};

constexpr WireReduceOp kWireReduceOps[] = {
    {::starling::ReduceOp::kSum, REDUCE_OP_SUM},
    {::starling::ReduceOp::kMin, REDUCE_OP_MIN},
    {::starling::ReduceOp::kMax, REDUCE_OP_MAX},
    {::starling::ReduceOp::kAverage, REDUCE_OP_AVERAGE},
    {::starling::ReduceOp::kProduct, REDUCE_OP_PRODUCT},
};
static_assert(sizeof(kWireReduceOps) / sizeof(kWireReduceOps[0]) ==
                  static_cast<size_t>(::starling::ReduceOp::kProduct) + 1,
              "every ReduceOp needs a wire value");

}  // namespace

DataType DataTypeToProto(::starling::DataType type) {
  for (const WireDataType& entry : kWireDataTypes) {
    if (entry.type == type) return entry.wire;
  }
  return DATA_TYPE_UNSPECIFIED;
}

absl::StatusOr<::starling::DataType> DataTypeFromProto(DataType type) {
  if (type == DATA_TYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError("data type unspecified");
  }
  for (const WireDataType& entry : kWireDataTypes) {
    if (entry.wire == type) return entry.type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data type ", static_cast<int>(type)));
}

ReduceOp ReduceOpToProto(::starling::ReduceOp op) {
  for (const WireReduceOp& entry : kWireReduceOps) {
    if (entry.op == op) return entry.wire;
  }
  return REDUCE_OP_UNSPECIFIED;
}

absl::StatusOr<::starling::ReduceOp> ReduceOpFromProto(ReduceOp op) {
  if (op == REDUCE_OP_UNSPECIFIED) {
    return absl::InvalidArgumentError("reduce op unspecified");
  }
  for (const WireReduceOp& entry : kWireReduceOps) {
    if (entry.wire == op) return entry.op;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op ", static_cast<int>(op)));
}

}  // namespace proto
}  // namespace starling
