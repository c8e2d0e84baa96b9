#include "server/node/node_admin_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/grpc_status.h"
#include "server/base/printable.h"

namespace starling {
namespace node {
namespace {

grpc::Status Joining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "the node daemon is still joining its group");
}

// One metadata value of the call ("" if it has none).
std::string Metadata(const grpc::ServerContext* context, const char* key) {
  const auto& metadata = context->client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace

grpc::Status NodeAdminService::Authorize(const grpc::ServerContext* context,
                                         absl::string_view method) {
  if (secrets_.operator_secret.empty() && secrets_.cluster_secret.empty()) {
    return grpc::Status::OK;
  }
  const std::string host = Metadata(context, kCallerHostKey);
  const std::string credential = Metadata(context, kCallCredentialKey);
  const absl::string_view secrets[] = {secrets_.operator_secret,
                                       secrets_.cluster_secret};
  const absl::Status verified =
      verifier_.Verify(secrets, CallRole::kOperator, method, "",
                       CallIdentity{host, ""}, credential, absl::Now());
  if (verified.ok()) return grpc::Status::OK;
  return ToGrpcStatus(absl::Status(
      verified.code(),
      absl::StrCat(
          "NodeAdmin.", method, " from ",
          host.empty() ? std::string("a caller that did not say who it is")
                       : BoundedPrintable(host, 64),
          " refused: ", verified.message(),
          credential.empty()
              ? "; this node takes operators' calls with a credential only: "
                "give starlingctl --secret_file (the operator secret, or the "
                "cluster secret)"
              : "")));
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
