#include "server/node/node_admin_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/grpc_server.h"
#include "server/base/grpc_status.h"

namespace starling {
namespace node {
namespace {

grpc::Status Joining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "the node daemon is still joining its group");
}

}  // namespace

grpc::Status NodeAdminService::Authorize(const grpc::ServerContext* context,
                                         absl::string_view method) {
  return ToGrpcStatus(verifier_.VerifyOperator(
      secrets_.operator_secret, secrets_.cluster_secret,
      absl::StrCat("NodeAdmin.", method), method,
      CallMetadata(*context, kCallerHostKey),
      CallMetadata(*context, kCallCredentialKey), "this node", absl::Now()));
}

grpc::Status NodeAdminService::GetStatus(grpc::ServerContext* context,
                                         const proto::GetNodeStatusRequest*,
                                         proto::NodeStatusReply* reply) {
  if (grpc::Status ok = Authorize(context, "GetStatus"); !ok.ok()) return ok;
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Status();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::ListShards(grpc::ServerContext* context,
                                          const proto::ListShardsRequest*,
                                          proto::ListShardsReply* reply) {
  if (grpc::Status ok = Authorize(context, "ListShards"); !ok.ok()) return ok;
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Shards();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::GetGroup(grpc::ServerContext* context,
                                        const proto::GetGroupRequest*,
                                        proto::GroupReply* reply) {
  if (grpc::Status ok = Authorize(context, "GetGroup"); !ok.ok()) return ok;
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Group();
  return grpc::Status::OK;
}

grpc::Status NodeAdminService::GetCollectives(
    grpc::ServerContext* context, const proto::GetCollectivesRequest*,
    proto::CollectivesReply* reply) {
  if (grpc::Status ok = Authorize(context, "GetCollectives"); !ok.ok())
    return ok;
  const NodeDaemon* d = daemon();
  if (d == nullptr) return Joining();
  *reply = d->Collectives();
  return grpc::Status::OK;
}

}  // namespace node
}  // namespace starling
