// CoordinatorService: the gRPC face of a Coordinator (proto/coordinator.proto).
// Each handler only reads the request, calls the Coordinator and converts
// the absl::Status (server/base/grpc_status.h).
//
// A Join is held until the group forms, and a BeginRun until every member
// asked, for at most the RPC's deadline less kJoinDeadlineMargin, so the
// node receives the coordinator's own DEADLINE_EXCEEDED (saying how many
// nodes joined, or which ranks have not begun) rather than gRPC's bare one;
// the requests' wait_timeout_ms shortens the wait further.
//
// Every answer, success or error, carries the trailing metadata
// kAnsweredByKey, so that a node can tell the coordinator's own errors
// (e.g. UNAVAILABLE: a rank is LOST) from a transport's (UNAVAILABLE:
// connection refused) and retry only the latter.
//
// Thread-safe; the Coordinator is borrowed and must outlive the service
// (and the grpc::Server it is registered with).
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_

#include "absl/time/time.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace starling {
namespace coordinator {

class CoordinatorService final : public proto::Coordinator::Service {
 public:
  static constexpr absl::Duration kJoinDeadlineMargin = absl::Milliseconds(100);
  // Trailing metadata key (value "coordinator") on every answer.
  static constexpr char kAnsweredByKey[] = "starling-answered-by";

  explicit CoordinatorService(Coordinator* coordinator)
      : coordinator_(coordinator) {}

  grpc::Status Join(grpc::ServerContext* context,
                    const proto::JoinRequest* request,
                    proto::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const proto::HeartbeatRequest* request,
                         proto::HeartbeatResponse* response) override;
  grpc::Status GetSchedule(grpc::ServerContext* context,
                           const proto::GetScheduleRequest* request,
                           proto::Schedule* response) override;
  grpc::Status ReportStep(grpc::ServerContext* context,
                          const proto::StepReport* request,
                          proto::StepReportAck* response) override;
  grpc::Status GetJobStatus(grpc::ServerContext* context,
                            const proto::GetJobStatusRequest* request,
                            proto::JobStatus* response) override;
  grpc::Status Rejoin(grpc::ServerContext* context,
                      const proto::RejoinRequest* request,
                      proto::JoinResponse* response) override;
  grpc::Status BeginRun(grpc::ServerContext* context,
                        const proto::BeginRunRequest* request,
                        proto::BeginRunResponse* response) override;
  grpc::Status EndRun(grpc::ServerContext* context,
                      const proto::EndRunRequest* request,
                      proto::EndRunResponse* response) override;

 private:
  Coordinator* const coordinator_;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_SERVICE_H_
