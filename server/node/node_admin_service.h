// NodeAdminService: the daemon's NodeAdmin gRPC service (proto/
// node_admin.proto): status, shards, group, collectives in flight. Handlers
// only call NodeDaemon and convert. The service is served before the daemon
// joins (so that an admin-port clash fails before the group forms): until
// set_daemon(), calls get UNAVAILABLE "still joining". With a secret, every
// call must carry an operator's credential (NodeAdminSecrets). Thread-safe
// (gRPC threads).
#ifndef STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_
#define STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_

#include <atomic>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/node/node_daemon.h"

namespace starling {
namespace node {

// The secrets an operator's call may be signed under (server/base/
// call_credential.h, role operator): with either set, every call must
// carry a fresh operator credential under one of them (PERMISSION_DENIED
// naming the call otherwise); with neither, calls are open (the node then
// serves them on loopback only, unless --insecure).
struct NodeAdminSecrets {
  std::string operator_secret;  // --operator_secret_file
  std::string cluster_secret;   // --cluster_secret_file
};

class NodeAdminService final : public proto::NodeAdmin::Service {
 public:
  explicit NodeAdminService(NodeAdminSecrets secrets = {})
      : secrets_(std::move(secrets)) {}
  // `daemon` is borrowed and must outlive the service.
  explicit NodeAdminService(const NodeDaemon* daemon) : daemon_(daemon) {}
  void set_daemon(const NodeDaemon* daemon) {
    // release: the daemon is fully started before handlers see it.
    daemon_.store(daemon, std::memory_order_release);
  }

  grpc::Status GetStatus(grpc::ServerContext* context,
                         const proto::GetNodeStatusRequest* request,
                         proto::NodeStatusReply* reply) override;
  grpc::Status ListShards(grpc::ServerContext* context,
                          const proto::ListShardsRequest* request,
                          proto::ListShardsReply* reply) override;
  grpc::Status GetGroup(grpc::ServerContext* context,
                        const proto::GetGroupRequest* request,
                        proto::GroupReply* reply) override;
  grpc::Status GetCollectives(grpc::ServerContext* context,
                              const proto::GetCollectivesRequest* request,
                              proto::CollectivesReply* reply) override;

 private:
  // OK, or PERMISSION_DENIED for a call without a fresh operator
  // credential where a secret is set.
  grpc::Status Authorize(const grpc::ServerContext* context,
                         absl::string_view method);
  // acquire: pairs with set_daemon().
  const NodeDaemon* daemon() const {
    return daemon_.load(std::memory_order_acquire);
  }
  std::atomic<const NodeDaemon*> daemon_{nullptr};
  const NodeAdminSecrets secrets_;
  CallVerifier verifier_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_NODE_ADMIN_SERVICE_H_
