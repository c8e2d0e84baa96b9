#include "server/node/node_admin_service.h"

namespace starling {
namespace node {

grpc::Status NodeAdminService::GetStatus(grpc::ServerContext*,
                                         const proto::GetNodeStatusRequest*,
                                         proto::NodeStatusReply* reply) {
  *reply = daemon_->Status();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::ListShards(grpc::ServerContext*,
                                          const proto::ListShardsRequest*,
                                          proto::ListShardsReply* reply) {
  *reply = daemon_->Shards();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::GetGroup(grpc::ServerContext*,
                                        const proto::GetGroupRequest*,
                                        proto::GroupReply* reply) {
  *reply = daemon_->Group();
  return grpc::Status::OK;
}

}  // namespace node
}  // namespace starling
