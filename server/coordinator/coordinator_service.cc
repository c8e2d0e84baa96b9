#include "server/coordinator/coordinator_service.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/time/clock.h"
#include "server/base/call_credential.h"
#include "server/base/grpc_server.h"
#include "server/base/grpc_status.h"
#include "server/base/printable.h"

namespace starling {
namespace coordinator {
namespace {

// The most bytes of an answer's error text: the messages quote what the
// caller sent (job ids, hostnames, addresses, tensor names, a run's
// error), which must neither swell past gRPC's 8 KiB of metadata (the
// caller would see RESOURCE_EXHAUSTED instead of the answer) nor carry
// control bytes to a terminal.
constexpr size_t kMaxAnswerBytes = 4096;

// Marks the answer as the coordinator's own (see the header).
grpc::Status Answer(grpc::ServerContext* context, const absl::Status& status) {
  context->AddTrailingMetadata(CoordinatorService::kAnsweredByKey,
                               "coordinator");
  if (status.ok()) return grpc::Status::OK;
  return ToGrpcStatus(absl::Status(
      status.code(), BoundedPrintable(status.message(), kMaxAnswerBytes)));
}

// Run ids are handed out by the coordinator from 1 upwards; one near the
// top of the range is none it handed out, and counting on from it would
// wrap the counter (the next run would be numbered 0).
constexpr uint64_t kMaxRunId = uint64_t{1} << 62;

absl::Status CheckRunId(uint64_t run_id, absl::string_view what) {
  if (run_id <= kMaxRunId) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " names run ", run_id,
      ", beyond any run id a coordinator hands out (at most ", kMaxRunId, ")"));
}

template <typename T>
grpc::Status Reply(grpc::ServerContext* context, absl::StatusOr<T> result,
                   T* response) {
  if (!result.ok()) return Answer(context, result.status());
  *response = *std::move(result);
  return Answer(context, absl::OkStatus());
}

// How long a waiting call (Join, BeginRun) may be held: the RPC deadline
// less `margin`, shortened by the request's wait timeout (ms, 0 = none).
absl::Time WaitDeadline(const grpc::ServerContext* context,
                        absl::Duration margin, int64_t wait_timeout_ms) {
  // gRPC reports "no deadline" as a time point far in the future, which
  // absl maps to InfiniteFuture.
  absl::Time deadline = absl::FromChrono(context->deadline()) - margin;
  if (wait_timeout_ms > 0) {
    deadline =
        std::min(deadline, absl::Now() + absl::Milliseconds(wait_timeout_ms));
  }
  return deadline;
}

// What members say in free text (run errors, worker names) reaches logs,
// `starlingctl status` and the operator's terminal: bounded and printable,
// so that no report can rewrite a screen or swell every status.
void Bound(std::string* text, size_t max) {
  *text = BoundedPrintable(*text, max);
}

constexpr size_t kMaxErrorBytes = 4096;
// As many as a node may declare (Coordinator::Join's bound).
constexpr int kMaxListedWorkers = 4096;
constexpr size_t kMaxNameBytes = 256;

// The caller as the call's metadata describes it; `node` (a Join's or
// Rejoin's) names the identity instead when given.
Coordinator::Caller CallerOf(const grpc::ServerContext* context,
                             const proto::JoinRequest* node = nullptr) {
  Coordinator::Caller caller;
  caller.host = node != nullptr ? node->hostname()
                                : CallMetadata(*context, kCallerHostKey);
  caller.address = node != nullptr ? node->data_address()
                                   : CallMetadata(*context, kCallerAddressKey);
  caller.credential = CallMetadata(*context, kCallCredentialKey);
  // A verified client certificate (mutual TLS) names the host it may be.
  const std::shared_ptr<const grpc::AuthContext> auth = context->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property :
         {"x509_common_name", "x509_subject_alternative_name"}) {
      for (const grpc::string_ref& name : auth->FindPropertyValues(property)) {
        caller.certified.emplace_back(name.data(), name.size());
      }
    }
  }
  return caller;
}

}  // namespace

grpc::Status CoordinatorService::Join(grpc::ServerContext* context,
                                      const proto::JoinRequest* request,
                                      proto::JoinResponse* response) {
  if (absl::Status caller =
          coordinator_->CheckCaller("Join", CallerOf(context, request), -1, 0);
      !caller.ok()) {
    return Answer(context, caller);
  }
  return Reply(context,
               coordinator_->Join(*request,
                                  WaitDeadline(context, kJoinDeadlineMargin,
                                               request->wait_timeout_ms()),
                                  [context] { return context->IsCancelled(); }),
               response);
}

grpc::Status CoordinatorService::Rejoin(grpc::ServerContext* context,
                                        const proto::RejoinRequest* request,
                                        proto::JoinResponse* response) {
  if (absl::Status caller = coordinator_->CheckCaller(
          "Rejoin", CallerOf(context, &request->node()), -1, 0);
      !caller.ok()) {
    return Answer(context, caller);
  }
  for (const absl::Status& checked :
       {CheckRunId(request->run().run_id(), "the re-registration's run"),
        CheckRunId(request->highest_run_id(),
                   "the re-registration's highest run")}) {
    if (!checked.ok()) return Answer(context, checked);
  }
  return Reply(context, coordinator_->Rejoin(*request), response);
}

grpc::Status CoordinatorService::BeginRun(grpc::ServerContext* context,
                                          const proto::BeginRunRequest* request,
                                          proto::BeginRunResponse* response) {
  if (absl::Status caller =
          coordinator_->CheckCaller("BeginRun", CallerOf(context),
                                    request->rank(), request->group_epoch());
      !caller.ok()) {
    return Answer(context, caller);
  }
  proto::BeginRunRequest bounded = *request;
  Bound(bounded.mutable_error(), kMaxErrorBytes);
  return Reply(
      context,
      coordinator_->BeginRun(bounded,
                             WaitDeadline(context, kJoinDeadlineMargin,
                                          request->wait_timeout_ms()),
                             [context] { return context->IsCancelled(); }),
      response);
}

grpc::Status CoordinatorService::EndRun(grpc::ServerContext* context,
                                        const proto::EndRunRequest* request,
                                        proto::EndRunResponse*) {
  if (absl::Status caller = coordinator_->CheckCaller(
          "EndRun", CallerOf(context), request->rank(), request->group_epoch());
      !caller.ok()) {
    return Answer(context, caller);
  }
  if (absl::Status checked = CheckRunId(request->run_id(), "the run's end");
      !checked.ok()) {
    return Answer(context, checked);
  }
  proto::EndRunRequest bounded = *request;
  Bound(bounded.mutable_error(), kMaxErrorBytes);
  return Answer(context, coordinator_->EndRun(bounded));
}

grpc::Status CoordinatorService::Heartbeat(
    grpc::ServerContext* context, const proto::HeartbeatRequest* request,
    proto::HeartbeatResponse* response) {
  if (absl::Status caller =
          coordinator_->CheckCaller("Heartbeat", CallerOf(context),
                                    request->rank(), request->group_epoch());
      !caller.ok()) {
    return Answer(context, caller);
  }
  if (absl::Status checked =
          CheckRunId(request->run().run_id(), "the heartbeat's run");
      !checked.ok()) {
    return Answer(context, checked);
  }
  // A node lists its local workers: at most the coordinator's bound on
  // them (a longer list is cut), each name, the run's error and the
  // transport summary bounded.
  proto::HeartbeatRequest bounded = *request;
  if (bounded.workers_size() > kMaxListedWorkers) {
    bounded.mutable_workers()->DeleteSubrange(
        kMaxListedWorkers, bounded.workers_size() - kMaxListedWorkers);
  }
  for (proto::WorkerStatus& worker : *bounded.mutable_workers()) {
    Bound(worker.mutable_name(), kMaxNameBytes);
  }
  Bound(bounded.mutable_run()->mutable_error(), kMaxErrorBytes);
  Bound(bounded.mutable_transport(), kMaxNameBytes);
  return Reply(context, coordinator_->Heartbeat(bounded), response);
}

grpc::Status CoordinatorService::GetSchedule(
    grpc::ServerContext* context, const proto::GetScheduleRequest* request,
    proto::Schedule* response) {
  if (absl::Status caller =
          coordinator_->CheckCaller("GetSchedule", CallerOf(context),
                                    request->rank(), request->group_epoch());
      !caller.ok()) {
    return Answer(context, caller);
  }
  return Reply(context, coordinator_->GetSchedule(*request), response);
}

grpc::Status CoordinatorService::ReportStep(grpc::ServerContext* context,
                                            const proto::StepReport* request,
                                            proto::StepReportAck*) {
  if (absl::Status caller =
          coordinator_->CheckCaller("ReportStep", CallerOf(context),
                                    request->rank(), request->group_epoch());
      !caller.ok()) {
    return Answer(context, caller);
  }
  proto::StepReport bounded = *request;
  Bound(bounded.mutable_error(), kMaxErrorBytes);
  return Answer(context, coordinator_->ReportStep(bounded));
}

grpc::Status CoordinatorService::GetJobStatus(
    grpc::ServerContext* context, const proto::GetJobStatusRequest* request,
    proto::JobStatus* response) {
  if (absl::Status caller =
          coordinator_->CheckOperator("GetJobStatus", CallerOf(context));
      !caller.ok()) {
    return Answer(context, caller);
  }
  return Reply(context, coordinator_->GetJobStatus(*request), response);
}

}  // namespace coordinator
}  // namespace starling
