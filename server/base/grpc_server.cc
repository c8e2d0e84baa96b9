#include "server/base/grpc_server.h"

#include "absl/strings/str_cat.h"

namespace starling {

absl::StatusOr<std::unique_ptr<grpc::Server>> ServeGrpc(
    const std::string& address, grpc::Service* service,
    absl::string_view flag) {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int bound_port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", address, " (", flag, ")"));
  }
  return server;
}

}  // namespace starling
