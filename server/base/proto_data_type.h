// The wire's DataType and ReduceOp (common.proto) <-> starling::DataType
// and starling::ReduceOp (server/base/data_type.h), the one definition of
// the element types and reduction operators: the only place the enums meet.
// Stateless; thread-safe.
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

// The same for the reduction operators (REDUCE_OP_UNSPECIFIED for a value
// outside the enum; InvalidArgument back for REDUCE_OP_UNSPECIFIED and
// unknown values).
ReduceOp ReduceOpToProto(::starling::ReduceOp op);
absl::StatusOr<::starling::ReduceOp> ReduceOpFromProto(ReduceOp op);

}  // namespace proto
}  // namespace starling

#endif  // STARLING_SERVER_BASE_PROTO_DATA_TYPE_H_
