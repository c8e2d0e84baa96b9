// The wire's DataType (common.proto) <-> starling::DataType
// (server/base/data_type.h), the one definition of the element types: the
// only place the two enums meet. Stateless; thread-safe.
#ifndef STARLING_SERVER_BASE_PROTO_DATA_TYPE_H_
#define STARLING_SERVER_BASE_PROTO_DATA_TYPE_H_

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/base/data_type.h"

namespace starling {
namespace proto {

// The wire value for `type`; DATA_TYPE_UNSPECIFIED for a value outside the
// enum.
DataType DataTypeToProto(::starling::DataType type);

// The element type `type` names. InvalidArgument for DATA_TYPE_UNSPECIFIED
// and for values this build does not know (a newer peer's, or garbage).
absl::StatusOr<::starling::DataType> DataTypeFromProto(DataType type);

}  // namespace proto
}  // namespace starling

#endif  // STARLING_SERVER_BASE_PROTO_DATA_TYPE_H_
