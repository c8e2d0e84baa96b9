#include "server/node/node_admin_service.h"

namespace starling {
namespace node {
namespace {

grpc::Status Joining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "the node daemon is still joining its group");
}

}  // namespace

grpc::Status NodeAdminService::GetStatus(grpc::ServerContext*,
                                         const proto::GetNodeStatusRequest*,
                                         proto::NodeStatusReply* reply) {
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Status();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::ListShards(grpc::ServerContext*,
                                          const proto::ListShardsRequest*,
                                          proto::ListShardsReply* reply) {
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Shards();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::GetGroup(grpc::ServerContext*,
                                        const proto::GetGroupRequest*,
                                        proto::GroupReply* reply) {
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Group();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::GetCollectives(
    grpc::ServerContext*, const proto::GetCollectivesRequest*,
    proto::CollectivesReply* reply) {
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Collectives();
  return grpc::Status::OK;
}

}  // namespace node
}  // namespace starling
