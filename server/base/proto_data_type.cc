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

}  // namespace proto
}  // namespace starling
