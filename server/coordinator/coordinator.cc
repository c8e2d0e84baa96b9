#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/coordinator/shard_map.h"

namespace starling {
namespace coordinator {
namespace {

// Most local workers one node may declare; more is a garbled request.
constexpr int kMaxLocalWorkers = 4096;
// How often a Join with a cancellation check looks at it.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

// "6s", "5.001s", "250ms": exact to the millisecond.
std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

int LocalWorkers(const proto::JoinRequest& request) {
  return std::max(1, request.capabilities().local_workers());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, const Clock* clock,
    metrics::MetricsRegistry* registry) {
  STARLING_RETURN_IF_ERROR(ValidateAndComplete(&options));
  STARLING_ASSIGN_OR_RETURN(CoordinatorMetrics metrics,
                            CoordinatorMetrics::Register(registry));
  metrics.expected_nodes->Set(options.expected_nodes);
  return std::unique_ptr<Coordinator>(
      new Coordinator(std::move(options), clock, metrics));
}

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock,
                         CoordinatorMetrics metrics)
    : options_(std::move(options)), clock_(clock), metrics_(metrics) {}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  changed_.SignalAll();
}

absl::Status Coordinator::CheckJobId(absl::string_view job_id,
                                     absl::string_view what) const {
  if (job_id == options_.job_id) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " names job '", job_id,
                   "', but this coordinator runs job '", options_.job_id, "'"));
}

// --- Rendezvous ------------------------------------------------------------

absl::Status Coordinator::CheckJoinLocked(const proto::JoinRequest& request) {
  const std::string who = absl::StrCat("node ", request.hostname(), " (",
                                       request.data_address(), ")");
  STARLING_RETURN_IF_ERROR(CheckJobId(request.job_id(), "join from " + who));
  if (request.version() != options_.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " runs starling ",
        request.version().empty() ? "(no version)" : request.version(),
        ", coordinator runs ", options_.version));
  }
  if (request.hostname().empty() || request.data_address().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "join from ", who, " must give a hostname and a data address"));
  }
  const int workers = request.capabilities().local_workers();
  if (workers < 0 || workers > kMaxLocalWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("join from ", who, " declares ", workers,
                     " local workers; expected 0..", kMaxLocalWorkers));
  }
  if (shutdown_) {
    return absl::UnavailableError("coordinator is shutting down");
  }
  return absl::OkStatus();
}

std::string Coordinator::RendezvousProgressLocked() const {
  std::vector<std::string> names;
  for (const PendingJoin& p : pending_) names.push_back(p.request.hostname());
  std::sort(names.begin(), names.end());
  return absl::StrCat(pending_.size(), " of ", options_.expected_nodes,
                      " nodes have joined (", absl::StrJoin(names, ", "), ")");
}

absl::StatusOr<proto::JoinResponse> Coordinator::Join(
    const proto::JoinRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const absl::Time start = absl::Now();
  deadline = std::min(deadline, start + options_.max_join_wait);
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(CheckJoinLocked(request));

  if (formed_) {
    // The same node asking again (its first answer was lost) gets the same
    // answer; anyone else is turned away.
    for (size_t rank = 0; rank < members_.size(); ++rank) {
      const Member& m = members_[rank];
      if (m.join.data_address() == request.data_address() &&
          m.join.hostname() == request.hostname() &&
          m.health != proto::NODE_HEALTH_LOST) {
        return JoinResponseLocked(static_cast<int>(rank));
      }
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", options_.job_id, "' already formed its group of ",
        members_.size(), " nodes (group epoch ", group_epoch_, "); node ",
        request.hostname(), " (", request.data_address(),
        ") cannot join: re-forming a group is not supported yet"));
  }
  for (const PendingJoin& p : pending_) {
    if (p.request.data_address() == request.data_address()) {
      return absl::AlreadyExistsError(
          absl::StrCat("node ", p.request.hostname(),
                       " is already waiting to join with "
                       "data address ",
                       request.data_address()));
    }
  }

  const uint64_t id = next_join_id_++;
  pending_.push_back({id, request});
  STARLING_LOG(INFO) << "node " << request.hostname() << " ("
                     << request.data_address() << ", version "
                     << request.version() << ") joined job '" << options_.job_id
                     << "': " << RendezvousProgressLocked();
  if (static_cast<int>(pending_.size()) == options_.expected_nodes) {
    FormGroupLocked();
  }

  while (!formed_ && !shutdown_) {
    const absl::Time now = absl::Now();
    const bool gave_up = cancelled && cancelled();
    if (gave_up || now >= deadline) {
      const std::string progress = RendezvousProgressLocked();
      pending_.erase(
          std::find_if(pending_.begin(), pending_.end(),
                       [id](const PendingJoin& p) { return p.id == id; }));
      if (gave_up) {
        return absl::CancelledError(
            absl::StrCat("node ", request.hostname(),
                         " cancelled its join while waiting: ", progress));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("job '", options_.job_id, "' did not form within ",
                       Seconds(now - start), ": ", progress));
    }
    absl::Time wake = deadline;
    if (cancelled) wake = std::min(wake, now + kCancelPollInterval);
    changed_.WaitWithDeadline(&mu_, wake);
  }
  if (!formed_) return absl::UnavailableError("coordinator is shutting down");
  for (const auto& [join_id, rank] : rank_of_join_) {
    if (join_id == id) return JoinResponseLocked(rank);
  }
  return absl::InternalError(absl::StrCat("join ", id, " of node ",
                                          request.hostname(),
                                          " has no rank in the formed group"));
}

void Coordinator::FormGroupLocked() {
  std::sort(pending_.begin(), pending_.end(),
            [](const PendingJoin& a, const PendingJoin& b) {
              return std::tie(a.request.hostname(), a.request.data_address()) <
                     std::tie(b.request.hostname(), b.request.data_address());
            });
  const int n = static_cast<int>(pending_.size());
  shard_map_ = ComputeShardMap(options_.parameter_count, n);
  const absl::Time now = clock_->Now();
  std::vector<int> workers_per_rank;
  for (int rank = 0; rank < n; ++rank) {
    Member member;
    member.join = pending_[rank].request;
    member.local_workers = LocalWorkers(member.join);
    member.last_heartbeat = now;
    member.shard_elements =
        shard_map_[rank].end_element() - shard_map_[rank].begin_element();
    workers_per_rank.push_back(member.local_workers);
    members_.push_back(std::move(member));
    rank_of_join_.emplace_back(pending_[rank].id, rank);
  }
  pending_.clear();
  planner_ = std::make_unique<SchedulePlanner>(
      options_.partitions_per_epoch, options_.epochs,
      options_.iterations_per_schedule, std::move(workers_per_rank));
  formed_ = true;
  group_epoch_ = 1;
  UpdateGroupGaugesLocked();
  changed_.SignalAll();
  STARLING_LOG(INFO) << "job '" << options_.job_id << "' formed a group of "
                     << n << " nodes (" << options_.parameter_count
                     << " parameters, " << planner_->total_workers()
                     << " workers, " << planner_->iterations_per_epoch()
                     << " iterations per epoch)";
  for (int rank = 0; rank < n; ++rank) {
    STARLING_LOG(INFO) << "  " << DescribeLocked(rank) << " shard ["
                       << shard_map_[rank].begin_element() << ", "
                       << shard_map_[rank].end_element() << ")";
  }
}

proto::JoinResponse Coordinator::JoinResponseLocked(int rank) const {
  proto::JoinResponse response;
  response.set_rank(rank);
  response.set_group_size(static_cast<int32_t>(members_.size()));
  response.set_group_epoch(group_epoch_);
  for (size_t r = 0; r < members_.size(); ++r) {
    proto::PeerInfo* peer = response.add_peers();
    peer->set_rank(static_cast<int32_t>(r));
    peer->set_data_address(members_[r].join.data_address());
    peer->set_admin_address(members_[r].join.admin_address());
    peer->set_hostname(members_[r].join.hostname());
    peer->set_health(members_[r].health);
  }
  for (const proto::ShardRange& range : shard_map_) {
    *response.add_shard_map() = range;
  }
  proto::JobConfig* config = response.mutable_config();
  config->set_mode(options_.mode);
  config->set_iterations_per_schedule(options_.iterations_per_schedule);
  config->set_optimizer(options_.optimizer);
  config->set_learning_rate(options_.learning_rate);
  config->set_collective_timeout_ms(
      absl::ToInt64Milliseconds(options_.collective_timeout));
  for (const proto::TensorSpec& tensor : options_.tensors) {
    *config->add_tensors() = tensor;
  }
  config->set_parameter_count(options_.parameter_count);
  config->set_dtype(options_.dtype);
  config->set_partitions_per_epoch(options_.partitions_per_epoch);
  config->set_epochs(options_.epochs);
  // Five heartbeats per timeout: one or two lost ones do not make a node
  // look dead.
  config->set_heartbeat_interval_ms(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(options_.heartbeat_timeout / 5)));
  config->set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  return response;
}

// --- Membership and failure detection ---------------------------------------

std::string Coordinator::DescribeLocked(int rank) const {
  const Member& m = members_[rank];
  return absl::StrCat("rank ", rank, " (", m.join.hostname(), ", ",
                      m.join.data_address(), ")");
}

absl::StatusOr<Coordinator::Member*> Coordinator::LiveMemberLocked(
    int rank, absl::string_view what) {
  if (!formed_) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " from rank ", rank,
                     " before the group formed: ", RendezvousProgressLocked()));
  }
  if (rank < 0 || rank >= static_cast<int>(members_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " from rank ", rank, ", but the group has ranks 0..",
                     members_.size() - 1));
  }
  Member* member = &members_[rank];
  if (member->health == proto::NODE_HEALTH_LOST) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " from ", DescribeLocked(rank),
        ", which was marked lost; re-joining is not supported yet"));
  }
  return member;
}

std::vector<int> Coordinator::DetectFailures() {
  absl::MutexLock lock(&mu_);
  return DetectFailuresLocked();
}

std::vector<int> Coordinator::DetectFailuresLocked() {
  std::vector<int> newly_lost;
  if (!formed_) return newly_lost;
  const absl::Time now = clock_->Now();
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    Member& m = members_[rank];
    if (m.health == proto::NODE_HEALTH_LOST) continue;
    const absl::Duration silent = now - m.last_heartbeat;
    if (silent <= options_.heartbeat_timeout) continue;
    m.health = proto::NODE_HEALTH_LOST;
    newly_lost.push_back(static_cast<int>(rank));
    lost_ranks_.push_back(static_cast<int>(rank));
    degraded_ = true;
    last_error_ = absl::StrCat(DescribeLocked(rank), " lost: no heartbeat for ",
                               Seconds(silent), " (timeout ",
                               Seconds(options_.heartbeat_timeout), ")");
    STARLING_LOG(ERROR) << last_error_ << "; the group is degraded";
    metrics_.node_failures->Increment();
  }
  if (!newly_lost.empty()) {
    std::sort(lost_ranks_.begin(), lost_ranks_.end());
    UpdateGroupGaugesLocked();
  }
  return newly_lost;
}

void Coordinator::UpdateGroupGaugesLocked() {
  int healthy = 0;
  for (const Member& m : members_) {
    healthy += m.health != proto::NODE_HEALTH_LOST ? 1 : 0;
  }
  metrics_.group_size->Set(healthy);
  metrics_.degraded->Set(degraded_ ? 1 : 0);
}

void Coordinator::NoteIterationLocked(Member* member, uint64_t iteration) {
  member->last_iteration =
      std::max(member->last_iteration.value_or(0), iteration);
  if (!highest_iteration_.has_value() || iteration > *highest_iteration_) {
    highest_iteration_ = iteration;
    metrics_.iteration->Set(static_cast<double>(iteration));
    metrics_.epoch->Set(
        static_cast<double>(iteration / planner_->iterations_per_epoch()));
  }
}

absl::StatusOr<proto::HeartbeatResponse> Coordinator::Heartbeat(
    const proto::HeartbeatRequest& request) {
  STARLING_RETURN_IF_ERROR(CheckJobId(
      request.job_id(), absl::StrCat("heartbeat from rank ", request.rank())));
  absl::MutexLock lock(&mu_);
  // The sender proves itself alive before the others are judged.
  STARLING_ASSIGN_OR_RETURN(Member * member,
                            LiveMemberLocked(request.rank(), "heartbeat"));
  member->last_heartbeat = clock_->Now();
  NoteIterationLocked(member, request.iteration());
  member->reported_shard_bytes = request.shard_bytes();
  member->reported_optimizer_state_bytes = request.optimizer_state_bytes();
  DetectFailuresLocked();

  proto::HeartbeatResponse response;
  response.set_group_epoch(group_epoch_);
  response.set_degraded(degraded_);
  for (int rank : lost_ranks_) response.add_lost_ranks(rank);
  return response;
}

// --- Scheduling and reports -------------------------------------------------

absl::StatusOr<proto::Schedule> Coordinator::GetSchedule(
    const proto::GetScheduleRequest& request) {
  STARLING_RETURN_IF_ERROR(
      CheckJobId(request.job_id(),
                 absl::StrCat("schedule request from rank ", request.rank())));
  absl::MutexLock lock(&mu_);
  DetectFailuresLocked();
  STARLING_RETURN_IF_ERROR(
      LiveMemberLocked(request.rank(), "schedule request").status());
  metrics_.schedule_requests->Increment();
  return planner_->Plan(request.rank(), request.next_iteration());
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
  STARLING_ASSIGN_OR_RETURN(Member * member,
                            LiveMemberLocked(request.rank(), what));
  NoteIterationLocked(member, request.iteration());
  const std::vector<std::string> rank = {absl::StrCat(request.rank())};
  if (!request.error().empty()) {
    member->last_error = request.error();
    last_error_ = absl::StrCat(DescribeLocked(request.rank()), " iteration ",
                               request.iteration(), ": ", request.error());
    metrics_.step_errors->WithLabels(rank)->Increment();
    STARLING_LOG(WARNING) << last_error_;
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
  status.set_degraded(degraded_);
  status.set_epochs(options_.epochs);
  status.set_last_error(last_error_);
  if (!formed_) {
    for (const PendingJoin& p : pending_) {
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
    return status;
  }
  status.set_group_size(static_cast<int32_t>(members_.size()));
  status.set_iterations_per_epoch(planner_->iterations_per_epoch());
  const uint64_t iteration = highest_iteration_.value_or(0);
  status.set_iteration(iteration);
  status.set_epoch(iteration / planner_->iterations_per_epoch());
  const uint64_t element_bytes = BytesPerElement(options_.dtype);
  const uint64_t slots = OptimizerStateSlots(options_.optimizer);
  int healthy = 0;
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    const Member& m = members_[rank];
    healthy += m.health != proto::NODE_HEALTH_LOST ? 1 : 0;
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
  }
  status.set_healthy_nodes(healthy);
  return status;
}

}  // namespace coordinator
}  // namespace starling
