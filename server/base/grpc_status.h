// The one place where absl::Status and grpc::Status convert into each other
// (STYLE.md §3: gRPC handlers parse, call a plain C++ class returning
// absl::Status, and convert). The numeric codes of both are the same
// canonical codes, so conversion keeps code and message.
#ifndef STARLING_SERVER_BASE_GRPC_STATUS_H_
#define STARLING_SERVER_BASE_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace starling {

grpc::Status ToGrpcStatus(const absl::Status& status);

// `what` names the call for the message, e.g. "Join to 10.0.0.1:29400".
absl::Status FromGrpcStatus(const grpc::Status& status,
                            absl::string_view what = "");

}  // namespace starling

#endif  // STARLING_SERVER_BASE_GRPC_STATUS_H_
