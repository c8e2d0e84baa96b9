// The Coordinator's runs, schedules, step reports and job status; the
// group (rendezvous, re-registration, membership) is in coordinator.cc.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/job_config_checks.h"
#include "server/base/logging.h"
#include "server/base/optimizer_names.h"
#include "server/base/status_macros.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_common.h"

namespace starling {
namespace coordinator {
namespace {

using internal::kCancelPollInterval;
using internal::kMaxLocalWorkers;
using internal::LocalWorkers;
using internal::Seconds;

// "rank 2" / "ranks 2, 3".
std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

}  // namespace

// --- Runs
// ---------------------------------------------------------------------

std::string Coordinator::BeginProgressLocked() const {
  std::vector<int> missing;
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    if (begin_waiting_.count(static_cast<int>(rank)) == 0) {
      missing.push_back(static_cast<int>(rank));
    }
  }
  return absl::StrCat(Ranks(missing), missing.size() == 1 ? " has" : " have",
                      " not ended ", missing.size() == 1 ? "its" : "their",
                      " declarations (", begin_waiting_.size(), " of ",
                      members_.size(), " ranks waiting)");
}

absl::StatusOr<proto::BeginRunResponse> Coordinator::BeginRun(
    const proto::BeginRunRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const int rank = request.rank();
  STARLING_RETURN_IF_ERROR(CheckJobId(
      request.job_id(), absl::StrCat("begin-run request from rank ", rank)));
  if (request.local_workers() < 0 ||
      request.local_workers() > kMaxLocalWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("begin-run request from rank ", rank, " declares ",
                     request.local_workers(), " local workers; expected 0..",
                     kMaxLocalWorkers));
  }
  const absl::Time start = absl::Now();
  deadline = std::min(deadline, start + options_.max_join_wait);
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("coordinator is shutting down");
  DetectFailuresLocked();
  STARLING_RETURN_IF_ERROR(
      MemberLocked(rank, request.group_epoch(), "begin-run request").status());

  const uint64_t id = next_call_id_++;
  if (auto old = begin_waiting_.find(rank); old != begin_waiting_.end()) {
    begin_answers_.emplace(
        old->second.id,
        absl::AbortedError(
            absl::StrCat("begin-run request from rank ", rank,
                         " was replaced by a newer one from the same rank")));
  }
  begin_waiting_[rank] = {id, request};
  changed_.SignalAll();
  if (begin_waiting_.size() == members_.size() && LostRanksLocked().empty()) {
    DecideBeginLocked();
  }
  const auto leave = [this, rank, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = begin_waiting_.find(rank);
    if (it != begin_waiting_.end() && it->second.id == id) {
      begin_waiting_.erase(it);
    }
  };
  while (true) {
    if (auto answer = begin_answers_.find(id); answer != begin_answers_.end()) {
      absl::StatusOr<proto::BeginRunResponse> result =
          std::move(answer->second);
      begin_answers_.erase(answer);
      return result;
    }
    if (shutdown_) {
      leave();
      return absl::UnavailableError("coordinator is shutting down");
    }
    if (const std::vector<int> lost = LostRanksLocked(); !lost.empty()) {
      leave();
      return absl::UnavailableError(absl::StrCat(
          "no run can begin: ", Ranks(lost), lost.size() == 1 ? " is" : " are",
          " LOST (", DescribeLocked(lost[0]), " first)"));
    }
    const absl::Time now = absl::Now();
    const bool gave_up = cancelled && cancelled();
    if (gave_up || now >= deadline) {
      // Counted now, not when the wait began.
      const std::string progress = BeginProgressLocked();
      leave();
      if (gave_up) {
        return absl::CancelledError(absl::StrCat(
            "rank ", rank, " cancelled its begin-run request: ", progress));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "no run began within ", Seconds(now - start), ": ", progress));
    }
    absl::Time wake = deadline;
    if (cancelled) wake = std::min(wake, now + kCancelPollInterval);
    changed_.WaitWithDeadline(&mu_, wake);
  }
}

uint64_t Coordinator::ResumeFromLocked(
    const std::vector<proto::RunStatus>& before,
    const proto::BeginRunResponse& begun) const {
  if (!proto::WritesCheckpoints(JobConfigFor(options_)) || before.empty()) {
    return 0;
  }
  const proto::RunStatus& previous = before.front();  // newest first
  if (previous.state() != proto::RunStatus::STATE_FAILED ||
      previous.parameter_count() != begun.parameter_count()) {
    return 0;
  }
  return previous.run_id();
}

void Coordinator::DecideBeginLocked() {
  std::vector<proto::BeginRunRequest> requests;
  for (const auto& [rank, call] : begin_waiting_) {
    requests.push_back(call.request);
  }
  // The job's previous run, before Begin records this one.
  const std::vector<proto::RunStatus> before = runs_.Recent();
  absl::StatusOr<proto::BeginRunResponse> outcome =
      runs_.Begin(requests, clock_->Now());
  if (outcome.ok()) {
    outcome->set_resume_run_id(ResumeFromLocked(before, *outcome));
  }
  if (outcome.ok()) metrics_.runs_started->Increment();
  for (const auto& [rank, call] : begin_waiting_) {
    begin_answers_.emplace(call.id, outcome);
  }
  begin_waiting_.clear();
  changed_.SignalAll();
  MarkDirtyLocked();
  if (!outcome.ok()) {
    last_error_ =
        absl::StrCat("no run could begin: ", outcome.status().message());
    STARLING_LOG(WARNING) << last_error_;
    return;
  }
  // A new run reads the data from its first iteration, planned for the
  // group as it is (a plan continued for a run that went on was its own).
  if (PlanContinuedLocked()) RebuildPlannerLocked();
  if (outcome->resume_run_id() != 0) {
    STARLING_LOG(WARNING)
        << "run " << outcome->run_id() << " goes on from run "
        << outcome->resume_run_id()
        << ", which did not finish: from its newest durable checkpoint, if "
        << "one was written whole (remove "
        << JobConfigFor(options_).checkpoint_dir() << "/run-"
        << outcome->resume_run_id() << " to begin afresh)";
  }
  STARLING_LOG(INFO) << "run " << outcome->run_id() << " began on "
                     << requests.size()
                     << " ranks: " << outcome->total_workers() << " workers, "
                     << outcome->tensors_size() << " tensors, "
                     << outcome->parameter_count()
                     << " parameters, first op sequence number "
                     << outcome->first_op_seq();
}

absl::Status Coordinator::EndRun(const proto::EndRunRequest& request) {
  const std::string what =
      absl::StrCat("end of run ", request.run_id(), " reported");
  STARLING_RETURN_IF_ERROR(CheckJobId(
      request.job_id(), absl::StrCat(what, " by rank ", request.rank())));
  if (request.run_id() == 0 ||
      (request.state() != proto::RunStatus::STATE_FINISHED &&
       request.state() != proto::RunStatus::STATE_FAILED)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " by rank ", request.rank(), " with state ",
        proto::RunStatus::State_Name(request.state()),
        ": needs a run id >= 1 and STATE_FINISHED or STATE_FAILED"));
  }
  absl::MutexLock lock(&mu_);
  DetectFailuresLocked();
  STARLING_RETURN_IF_ERROR(
      MemberLocked(request.rank(), request.group_epoch(), what).status());
  EndRunLocked(request.rank(), request);
  // Nodes waiting to join are taken in once the run ended.
  ReformIfDueLocked();
  return absl::OkStatus();
}

void Coordinator::EndRunLocked(int rank, const proto::EndRunRequest& request) {
  Member& member = members_[rank];
  if (request.state() == proto::RunStatus::STATE_FAILED &&
      request.suspended() && CanCarryLocked() &&
      runs_.current()->run_id() == request.run_id()) {
    // Stopped there for a peer's loss: the run goes on if the group
    // re-forms without the lost member (CheckSuspendedLocked bounds it).
    if (suspended_since_ == absl::InfiniteFuture()) {
      suspended_since_ = clock_->Now();
      suspended_on_ = absl::StrCat("run ", request.run_id(), " stopped on ",
                                   DescribeLocked(rank), ": ", request.error());
      STARLING_LOG(WARNING)
          << suspended_on_ << "; it goes on once the group re-forms";
    }
    return;
  }
  const RunBook::Ended ended =
      runs_.End(rank, DescribeLocked(rank), static_cast<int>(members_.size()),
                request, clock_->Now());
  if (request.state() == proto::RunStatus::STATE_FAILED &&
      !request.error().empty()) {
    member.last_error = request.error();
  }
  // Status shows the run ended on this node at once, not a heartbeat later.
  if (member.run.run_id() == request.run_id()) {
    member.run.set_state(request.state());
    member.run.set_steps(std::max(member.run.steps(), request.steps()));
    if (!request.error().empty()) member.run.set_error(request.error());
  }
  if (ended.failed_now || ended.finished_now) MarkDirtyLocked();
  if (ended.failed_now) {
    metrics_.runs_ended->WithLabels({"failed"})->Increment();
    last_error_ = ended.error;
    STARLING_LOG(WARNING) << "run " << request.run_id()
                          << " failed: " << ended.error
                          << "; the other ranks learn it by heartbeat";
  } else if (ended.finished_now) {
    metrics_.runs_ended->WithLabels({"finished"})->Increment();
    STARLING_LOG(INFO) << "run " << request.run_id()
                       << " finished on every rank after " << request.steps()
                       << " steps";
  }
}

// --- Scheduling and reports -------------------------------------------------

absl::StatusOr<proto::Schedule> Coordinator::GetSchedule(
    const proto::GetScheduleRequest& request) {
  STARLING_RETURN_IF_ERROR(
      CheckJobId(request.job_id(),
                 absl::StrCat("schedule request from rank ", request.rank())));
  absl::MutexLock lock(&mu_);
  DetectFailuresLocked();
  STARLING_RETURN_IF_ERROR(LiveMemberLocked(request.rank(),
                                            request.group_epoch(),
                                            "schedule request")
                               .status());
  metrics_.schedule_requests->Increment();
  uint64_t next = request.next_iteration();
  if (proto::UsesShardOwners(JobConfigFor(options_).mode()) &&
      !schedule_rebase_pending_ && planner_->continued() &&
      next < planner_->first_iteration()) {
    // The shard owners' workers run at their own pace: one behind where
    // the re-formed group's plan begins (another worker asked first) goes
    // on from there; its partitions in between are not read this epoch.
    next = planner_->first_iteration();
  }
  STARLING_RETURN_IF_ERROR(
      Annotate(RebaseScheduleLocked(next),
               absl::StrCat("schedule request from rank ", request.rank())));
  return planner_->Plan(request.rank(), next);
}

absl::Status Coordinator::ReportStep(const proto::StepReport& request) {
  const std::string what =
      absl::StrCat("step report for iteration ", request.iteration());
  STARLING_RETURN_IF_ERROR(CheckJobId(
      request.job_id(), absl::StrCat(what, " from rank ", request.rank())));
  for (double seconds :
       {request.compute_seconds(), request.communication_seconds()}) {
    if (!std::isfinite(seconds) || seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " from rank ", request.rank(), " has compute ",
          request.compute_seconds(), "s and communication ",
          request.communication_seconds(), "s: both must be finite and >= 0"));
    }
  }
  absl::MutexLock lock(&mu_);
  DetectFailuresLocked();
  STARLING_ASSIGN_OR_RETURN(
      Member * member,
      LiveMemberLocked(request.rank(), request.group_epoch(), what));
  NoteIterationLocked(member, request.iteration());
  const std::vector<std::string> rank = {absl::StrCat(request.rank())};
  if (!request.error().empty()) {
    member->last_error = request.error();
    const std::string error =
        absl::StrCat(DescribeLocked(request.rank()), " iteration ",
                     request.iteration(), ": ", request.error());
    metrics_.step_errors->WithLabels(rank)->Increment();
    STARLING_LOG(WARNING) << error;
    // While a run fails, the other ranks' errors are mostly echoes of the
    // first (a collective that lost its peer); the run's error stays the
    // job's last one.
    const std::vector<proto::RunStatus> recent = runs_.Recent();
    const bool run_failed =
        runs_.current() == nullptr && !recent.empty() &&
        recent[0].state() == proto::RunStatus::STATE_FAILED &&
        !last_error_.empty();
    if (!run_failed) last_error_ = error;
    return absl::OkStatus();
  }
  metrics_.step_duration->WithLabels(rank)->Observe(
      request.compute_seconds() + request.communication_seconds());
  metrics_.compute_seconds->WithLabels(rank)->Increment(
      request.compute_seconds());
  metrics_.communication_seconds->WithLabels(rank)->Increment(
      request.communication_seconds());
  metrics_.loss->WithLabels(rank)->Set(request.loss());
  return absl::OkStatus();
}

absl::StatusOr<proto::JobStatus> Coordinator::GetJobStatus(
    const proto::GetJobStatusRequest& request) {
  if (!request.job_id().empty()) {
    STARLING_RETURN_IF_ERROR(CheckJobId(request.job_id(), "status request"));
  }
  absl::MutexLock lock(&mu_);
  DetectFailuresLocked();
  const absl::Time now = clock_->Now();
  proto::JobStatus status;
  status.set_job_id(options_.job_id);
  status.set_expected_nodes(options_.expected_nodes);
  status.set_formed(formed_);
  status.set_group_epoch(group_epoch_);
  status.set_epochs(options_.epochs);
  status.set_last_error(last_error_);
  status.set_status_unix_seconds(absl::ToUnixMicros(now) / 1e6);
  if (!reformed_because_.empty()) {
    status.set_reformed_because(reformed_because_);
    status.set_reformed_unix_seconds(absl::ToUnixMicros(reformed_at_) / 1e6);
  }
  if (const proto::RunStatus* run = runs_.current(); run != nullptr) {
    *status.mutable_current_run() = *run;
  } else if (!begin_waiting_.empty()) {
    status.mutable_current_run()->set_state(proto::RunStatus::STATE_DECLARING);
  }
  for (const proto::RunStatus& run : runs_.Recent()) {
    *status.add_recent_runs() = run;
  }
  // Nodes waiting to join: rank -1, JOINING (after the members, once the
  // group formed).
  const auto add_waiting = [&status](const std::vector<PendingJoin>& pending) {
    for (const PendingJoin& p : pending) {
      proto::NodeStatus* node = status.add_nodes();
      proto::PeerInfo* peer = node->mutable_peer();
      peer->set_rank(-1);
      peer->set_hostname(p.request.hostname());
      peer->set_data_address(p.request.data_address());
      peer->set_admin_address(p.request.admin_address());
      peer->set_health(proto::NODE_HEALTH_JOINING);
      node->set_local_workers(LocalWorkers(p.request));
      node->set_version(p.request.version());
    }
  };
  if (!formed_) {
    add_waiting(pending_);
    return status;
  }
  status.set_group_size(static_cast<int32_t>(members_.size()));
  status.set_iterations_per_epoch(planner_->iterations_per_epoch());
  const uint64_t iteration = highest_iteration_.value_or(0);
  status.set_iteration(iteration);
  status.set_epoch(planner_->EpochOf(iteration));
  const uint64_t element_bytes = BytesPerElement(options_.dtype);
  const OptimizerInfo* optimizer = FindOptimizer(options_.optimizer);
  const uint64_t slots = optimizer != nullptr ? optimizer->state_slots : 0;
  int healthy = 0;
  bool degraded = false;
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    const Member& m = members_[rank];
    healthy += m.health == proto::NODE_HEALTH_HEALTHY ? 1 : 0;
    degraded |= m.health == proto::NODE_HEALTH_LOST;
    proto::NodeStatus* node = status.add_nodes();
    proto::PeerInfo* peer = node->mutable_peer();
    peer->set_rank(static_cast<int32_t>(rank));
    peer->set_hostname(m.join.hostname());
    peer->set_data_address(m.join.data_address());
    peer->set_admin_address(m.join.admin_address());
    peer->set_health(m.health);
    const uint64_t shard_bytes = m.shard_elements * element_bytes;
    node->set_shard_bytes(m.reported_shard_bytes != 0 ? m.reported_shard_bytes
                                                      : shard_bytes);
    node->set_optimizer_state_bytes(m.reported_optimizer_state_bytes != 0
                                        ? m.reported_optimizer_state_bytes
                                        : slots * shard_bytes);
    const int64_t nanos = absl::ToUnixNanos(m.last_heartbeat);
    node->mutable_last_heartbeat()->set_seconds(nanos / 1000000000);
    node->mutable_last_heartbeat()->set_nanos(
        static_cast<int32_t>(nanos % 1000000000));
    node->set_heartbeat_age_seconds(
        absl::ToDoubleSeconds(now - m.last_heartbeat));
    node->set_last_iteration(m.last_iteration.value_or(0));
    node->set_local_workers(m.local_workers);
    node->set_version(m.join.version());
    node->set_last_error(m.last_error);
    for (const proto::WorkerStatus& worker : m.workers) {
      *node->add_workers() = worker;
    }
    *node->mutable_run() = m.run;
    node->set_transport(m.transport);
  }
  // Late joiners, taken in between runs.
  add_waiting(pending_);
  status.set_healthy_nodes(healthy);
  status.set_degraded(degraded);
  return status;
}

}  // namespace coordinator
}  // namespace starling
