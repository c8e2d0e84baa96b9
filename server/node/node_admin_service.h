// NodeAdminService: the daemon's NodeAdmin gRPC service (proto/
// node_admin.proto): status, shards, group. Handlers only call NodeDaemon
// and convert. Thread-safe (gRPC threads).
#ifndef STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_
#define STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_

#include "grpcpp/grpcpp.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/node/node_daemon.h"

namespace starling {
namespace node {

class NodeAdminService final : public proto::NodeAdmin::Service {
 public:
  // `daemon` is borrowed and must outlive the service.
  explicit NodeAdminService(const NodeDaemon* daemon) : daemon_(daemon) {}

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const proto::GetNodeStatusRequest* request,
                         proto::NodeStatusReply* reply) override;
  grpc::Status ListShards(grpc::ServerContext* context,
                          const proto::ListShardsRequest* request,
                          proto::ListShardsReply* reply) override;
  grpc::Status GetGroup(grpc::ServerContext* context,
                        const proto::GetGroupRequest* request,
                        proto::GroupReply* reply) override;

 private:
  const NodeDaemon* const daemon_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_
