#include "server/base/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace starling {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status,
                            absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  std::string message = status.error_message();
  if (!what.empty()) message = absl::StrCat(what, ": ", message);
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      message);
}

}  // namespace starling
