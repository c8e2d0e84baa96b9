#include "server/coordinator/coordinator_service.h"

#include <utility>

#include "absl/time/clock.h"
#include "server/base/grpc_status.h"

namespace starling {
namespace coordinator {
namespace {

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status CoordinatorService::Join(grpc::ServerContext* context,
                                      const proto::JoinRequest* request,
                                      proto::JoinResponse* response) {
  // gRPC reports "no deadline" as a time point far in the future, which
  // absl maps to InfiniteFuture.
  absl::Time deadline =
      absl::FromChrono(context->deadline()) - kJoinDeadlineMargin;
  if (request->wait_timeout_ms() > 0) {
    deadline = std::min(
        deadline, absl::Now() + absl::Milliseconds(request->wait_timeout_ms()));
  }
  return Reply(coordinator_->Join(*request, deadline,
                                  [context] { return context->IsCancelled(); }),
               response);
}

grpc::Status CoordinatorService::Heartbeat(
    grpc::ServerContext*, const proto::HeartbeatRequest* request,
    proto::HeartbeatResponse* response) {
  return Reply(coordinator_->Heartbeat(*request), response);
}

grpc::Status CoordinatorService::GetSchedule(
    grpc::ServerContext*, const proto::GetScheduleRequest* request,
    proto::Schedule* response) {
  return Reply(coordinator_->GetSchedule(*request), response);
}

grpc::Status CoordinatorService::ReportStep(grpc::ServerContext*,
                                            const proto::StepReport* request,
                                            proto::StepReportAck*) {
  return ToGrpcStatus(coordinator_->ReportStep(*request));
}

grpc::Status CoordinatorService::GetJobStatus(
    grpc::ServerContext*, const proto::GetJobStatusRequest* request,
    proto::JobStatus* response) {
  return Reply(coordinator_->GetJobStatus(*request), response);
}

}  // namespace coordinator
}  // namespace starling
