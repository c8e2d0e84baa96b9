// The gRPC server every Starling service runs on (the coordinator on
// --listen, a node's NodeAdmin on --admin_port): one service on one
// address, with SO_REUSEPORT off, since gRPC sets it by default and a
// second process would then share the port silently.
#ifndef STARLING_SERVER_BASE_GRPC_SERVER_H_
#define STARLING_SERVER_BASE_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace starling {

// Serves `service` (borrowed: it must outlive the server) on `address`
// ("HOST:PORT"). Unavailable "cannot serve gRPC on ADDRESS (FLAG)" when the
// address cannot be bound; `flag` names the option that gave it.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeGrpc(
    const std::string& address, grpc::Service* service, absl::string_view flag);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_GRPC_SERVER_H_
