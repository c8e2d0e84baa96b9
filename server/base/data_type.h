// The element types of tensors and the reduction operators: the one
// definition that the client API, the collectives, the shards and the
// control plane's wire enums (mapped in proto_data_type.h) all use, with
// each type's name, size and kind.
// Immutable data and free functions; thread-safe.
#ifndef STARLING_SERVER_BASE_DATA_TYPE_H_
#define STARLING_SERVER_BASE_DATA_TYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {

enum class DataType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };

// Bytes per element: 4, 8, 2, 2, 4, 8.
size_t DataTypeBytes(DataType type);

// "float32", "float64", "float16", "bfloat16", "int32", "int64".
absl::string_view DataTypeName(DataType type);

// Inverse of DataTypeName, any case; also accepts "fp32", "fp64", "fp16",
// "bf16". InvalidArgument for anything else.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);

// True for kFloat32, kFloat64, kFloat16, kBFloat16.
bool IsFloatingPoint(DataType type);

// Reduction operators of the collectives. kAverage is the sum divided by
// the number of contributors once, at the end; for integers the division
// truncates toward zero (C++ `/`), and integer sums and products wrap
// modulo 2^bits (two's complement) instead of overflowing.
enum class ReduceOp { kSum, kMin, kMax, kAverage, kProduct };

// "sum", "min", "max", "average", "product".
absl::string_view ReduceOpName(ReduceOp op);

// Inverse of ReduceOpName, any case ("avg" and "prod" accepted).
// InvalidArgument otherwise.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_DATA_TYPE_H_
