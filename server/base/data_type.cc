#include "server/base/data_type.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace {

struct DataTypeInfo {
  DataType type;
  const char* name;
  // Short spelling ParseDataType also accepts; nullptr for none.
  const char* alias;
  size_t bytes;
  bool floating_point;
};

// Indexed by the enumerator's value; the static_asserts below keep it so.
constexpr DataTypeInfo kDataTypes[] = {
    {DataType::kFloat32, "float32", "fp32", 4, true},
    {DataType::kFloat64, "float64", "fp64", 8, true},
    {DataType::kFloat16, "float16", "fp16", 2, true},
    {DataType::kBFloat16, "bfloat16", "bf16", 2, true},
    {DataType::kInt32, "int32", nullptr, 4, false},
    {DataType::kInt64, "int64", nullptr, 8, false},
};

constexpr bool TableIsIndexedByValue() {
  for (size_t i = 0; i < sizeof(kDataTypes) / sizeof(kDataTypes[0]); ++i) {
    if (static_cast<size_t>(kDataTypes[i].type) != i) return false;
  }
  return true;
}
static_assert(TableIsIndexedByValue(), "kDataTypes out of enum order");
static_assert(sizeof(kDataTypes) / sizeof(kDataTypes[0]) ==
                  static_cast<size_t>(DataType::kInt64) + 1,
              "kDataTypes misses a DataType");

// nullptr for a value outside the enum (a cast from bad input).
const DataTypeInfo* Find(DataType type) {
  const size_t i = static_cast<size_t>(type);
  if (i >= sizeof(kDataTypes) / sizeof(kDataTypes[0])) return nullptr;
  return &kDataTypes[i];
}

}  // namespace

size_t DataTypeBytes(DataType type) {
  const DataTypeInfo* info = Find(type);
  return info == nullptr ? 0 : info->bytes;
}

absl::string_view DataTypeName(DataType type) {
  const DataTypeInfo* info = Find(type);
  return info == nullptr ? "unknown" : info->name;
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const DataTypeInfo& info : kDataTypes) {
    if (lower == info.name || (info.alias != nullptr && lower == info.alias)) {
      return info.type;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data type \"", name,
                   "\" (want float32, float64, float16, bfloat16, int32 or "
                   "int64)"));
}

bool IsFloatingPoint(DataType type) {
  const DataTypeInfo* info = Find(type);
  return info != nullptr && info->floating_point;
}

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "sum") return ReduceOp::kSum;
  if (lower == "min") return ReduceOp::kMin;
  if (lower == "max") return ReduceOp::kMax;
  if (lower == "average" || lower == "avg") return ReduceOp::kAverage;
  if (lower == "product" || lower == "prod") return ReduceOp::kProduct;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op \"", name,
                   "\" (want sum, min, max, average or product)"));
}

}  // namespace starling
