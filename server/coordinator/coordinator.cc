#include "server/coordinator/coordinator.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/coordinator_answers.h"
#include "server/base/job_config_checks.h"
#include "server/base/listen_address.h"
#include "server/base/logging.h"
#include "server/base/optimizer_names.h"
#include "server/base/printable.h"
#include "server/base/status_macros.h"
#include "server/coordinator/coordinator_common.h"
#include "server/coordinator/shard_map.h"

namespace starling {
namespace coordinator {
namespace {

using internal::kCancelPollInterval;
using internal::kMaxHostnameBytes;
using internal::kMaxLocalWorkers;
using internal::LocalWorkers;
using internal::Seconds;

// JoinResponse.group_key and .member_key: 256 random bits.
constexpr size_t kGroupKeyBytes = 32;

// The name a member's key is kept under (CoordinatorState.member_keys).
std::string MemberKeyName(absl::string_view host, absl::string_view address) {
  return absl::StrCat(host, " ", address);
}
std::string MemberKeyName(const proto::JoinRequest& node) {
  return MemberKeyName(node.hostname(), node.data_address());
}

}  // namespace

namespace {

// "20261127-044500-9f3a2c1b": when, and a random part for two coordinators
// started in the same second.
std::string NewCheckpointIncarnation(absl::Time now) {
  uint32_t random = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&random), sizeof(random));
  return absl::StrCat(
      absl::FormatTime("%Y%m%d-%H%M%S", now, absl::UTCTimeZone()), "-",
      absl::Hex(random, absl::kZeroPad8));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, const Clock* clock,
    metrics::MetricsRegistry* registry) {
  STARLING_RETURN_IF_ERROR(ValidateAndComplete(&options));
  STARLING_ASSIGN_OR_RETURN(CoordinatorMetrics metrics,
                            CoordinatorMetrics::Register(registry));
  metrics.expected_nodes->Set(options.expected_nodes);
  std::optional<proto::CoordinatorState> state;
  std::unique_ptr<StateStore> store;
  if (!options.state_file.empty()) {
    store = std::make_unique<StateFile>(options.state_file);
  } else if (!options.state_etcd.empty()) {
    STARLING_ASSIGN_OR_RETURN(
        store, EtcdStore::Create(options.state_etcd,
                                 EtcdStore::KeyFor(options.state_etcd_prefix,
                                                   options.job_id)));
  }
  if (store != nullptr) {
    STARLING_ASSIGN_OR_RETURN(state, store->Read());
    if (state.has_value() && state->job_id() != options.job_id) {
      return absl::FailedPreconditionError(
          absl::StrCat(store->where(), " records job '", state->job_id(),
                       "', not '", options.job_id, "' (one record per job)"));
    }
    options.state_where = store->where();
  }
  if (options.checkpoint_every_steps > 0 ||
      options.checkpoint_interval > absl::ZeroDuration()) {
    options.checkpoint_incarnation =
        state.has_value() && !state->checkpoint_incarnation().empty()
            ? state->checkpoint_incarnation()
            : NewCheckpointIncarnation(clock->Now());
  }
  std::unique_ptr<Coordinator> coordinator(
      new Coordinator(std::move(options), clock, metrics));
  if (store != nullptr) {
    if (state.has_value()) {
      absl::MutexLock lock(&coordinator->mu_);
      coordinator->RestoreLocked(*state);
    }
    Coordinator* c = coordinator.get();
    metrics::CounterFamily* writes = c->metrics_.state_writes;
    coordinator->persister_ = std::make_unique<StatePersister>(
        std::move(store), [c] { return c->Snapshot(); },
        [writes](const absl::Status& written) {
          writes->WithLabels({written.ok() ? "ok" : "failed"})->Increment();
        });
  }
  return coordinator;
}

Coordinator::Coordinator(CoordinatorOptions options, const Clock* clock,
                         CoordinatorMetrics metrics)
    : options_(std::move(options)),
      clock_(clock),
      metrics_(metrics),
      runs_(options_.parameter_count) {}

Coordinator::~Coordinator() {
  Shutdown();
  // Its last write snapshots this coordinator: before the members go.
  if (persister_ != nullptr) persister_->Stop();
}

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

absl::Status Coordinator::CheckNodeLocked(const proto::JoinRequest& request,
                                          absl::string_view what) const {
  const std::string who =
      absl::StrCat("node ", BoundedPrintable(request.hostname(), 64), " (",
                   BoundedPrintable(request.data_address(), 64), ")");
  STARLING_RETURN_IF_ERROR(
      CheckJobId(request.job_id(), absl::StrCat(what, " from ", who)));
  if (request.version() != options_.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, " runs starling ",
        request.version().empty() ? "(no version)" : request.version(),
        ", coordinator runs ", options_.version));
  }
  if (request.hostname().empty() || request.data_address().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " from ", who, " must give a hostname and a data address"));
  }
  // What a node calls itself reaches status, logs and the operator's
  // terminal: a host name's letters only, and addresses that are ones.
  const absl::string_view host = request.hostname();
  const bool host_ok =
      host.size() <= kMaxHostnameBytes &&
      std::all_of(host.begin(), host.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
               c == '-' || c == '_';
      });
  if (!host_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " from ", who, ": the hostname must be at most ",
                     kMaxHostnameBytes, " letters, digits, '.', '-' or '_'"));
  }
  for (const auto& [address, field] :
       {std::pair<absl::string_view, const char*>{request.data_address(),
                                                  "data address"},
        {request.admin_address(), "admin address"}}) {
    if (address.empty() && std::string_view(field) == "admin address") {
      continue;
    }
    absl::StatusOr<HostPort> parsed = ParseHostPort(address);
    if (!parsed.ok() || parsed->port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " from ", who, ": its ", field, " '",
                       BoundedPrintable(address, 64),
                       "' is not HOST:PORT with a port in 1..65535"));
    }
  }
  const int workers = request.capabilities().local_workers();
  if (workers < 0 || workers > kMaxLocalWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " from ", who, " declares ", workers,
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
  return absl::StrCat(
      pending_.size(), " of ", options_.expected_nodes, " nodes have joined",
      names.empty() ? "" : absl::StrCat(" (", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<proto::JoinResponse> Coordinator::Join(
    const proto::JoinRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const absl::Time start = absl::Now();
  deadline = std::min(deadline, start + options_.max_join_wait);
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(CheckNodeLocked(request, "join"));
  if (formed_ && restored_) {
    STARLING_RETURN_IF_ERROR(
        SettleRestoredGroupLocked(request, deadline, cancelled));
  }
  if (formed_) {
    DetectFailuresLocked();
    STARLING_RETURN_IF_ERROR(
        AwaitMemberSilenceLocked(request, deadline, cancelled));
    STARLING_ASSIGN_OR_RETURN(std::optional<proto::JoinResponse> again,
                              LateJoinLocked(request));
    if (again.has_value()) {
      IssueMemberKeyLocked(request, &*again);
      return *std::move(again);
    }
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

  const uint64_t id = next_call_id_++;
  pending_.push_back({id, request});
  if (formed_) {
    STARLING_LOG(INFO) << "node " << request.hostname() << " ("
                       << request.data_address()
                       << ") asks to join the running group of job '"
                       << options_.job_id << "' (group epoch " << group_epoch_
                       << ", " << members_.size()
                       << " members); the group re-forms with it "
                       << (CanCarryLocked() ? "now: the run goes on with it"
                                            : "between runs");
    ReformIfDueLocked();
  } else {
    STARLING_LOG(INFO) << "node " << request.hostname() << " ("
                       << request.data_address() << ", version "
                       << request.version() << ") joined job '"
                       << options_.job_id
                       << "': " << RendezvousProgressLocked();
    if (static_cast<int>(pending_.size()) == options_.expected_nodes) {
      FormGroupLocked();
    }
  }

  const auto is_this = [id](const PendingJoin& p) { return p.id == id; };
  const auto waiting = [this, &is_this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(pending_.begin(), pending_.end(), is_this);
  };
  while (waiting() && !shutdown_) {
    const absl::Time now = absl::Now();
    const bool gave_up = cancelled && cancelled();
    if (gave_up || now >= deadline) {
      const std::string progress =
          formed_ ? absl::StrCat(
                        "the running group (epoch ", group_epoch_, ") ",
                        kTakenInBetweenRuns, " and ",
                        runs_.current() != nullptr
                            ? absl::StrCat("run ", runs_.current()->run_id(),
                                           " is running")
                            : std::string("is waiting"),
                        reform_blocked_.empty()
                            ? std::string()
                            : absl::StrCat(" (", reform_blocked_, ")"))
                  : RendezvousProgressLocked();
      pending_.erase(std::find_if(pending_.begin(), pending_.end(), is_this));
      if (gave_up) {
        return absl::CancelledError(
            absl::StrCat("node ", request.hostname(),
                         " cancelled its join while waiting: ", progress));
      }
      return absl::DeadlineExceededError(
          absl::StrCat("job '", options_.job_id, "' did not ",
                       formed_ ? "take the node in" : "form", " within ",
                       Seconds(now - start), ": ", progress));
    }
    absl::Time wake = deadline;
    // A waiting late joiner looks again: a run ends, a grace passes.
    if (cancelled || formed_) wake = std::min(wake, now + kCancelPollInterval);
    changed_.WaitWithDeadline(&mu_, wake);
    if (formed_) ReformIfDueLocked();
  }
  if (waiting()) return absl::UnavailableError("coordinator is shutting down");
  if (const int rank = RankOfLocked(request); rank >= 0) {
    // A Join is a new daemon process: it has no key of its own yet.
    proto::JoinResponse response = JoinResponseLocked(rank);
    IssueMemberKeyLocked(request, &response);
    return response;
  }
  if (!adopted_from_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", request.hostname(), " (", request.data_address(),
                     ") cannot join: ", adopted_from_));
  }
  return absl::UnavailableError(
      absl::StrCat("node ", request.hostname(), " (", request.data_address(),
                   ") was taken into group epoch ", group_epoch_,
                   " and dropped again before its answer; it joins again"));
}

bool Coordinator::AliveLocked(const Member& m) const {
  return m.health != proto::NODE_HEALTH_LOST && m.heard_from &&
         m.suspected_at == absl::InfiniteFuture() &&
         clock_->Now() - m.last_heartbeat < 2 * HeartbeatInterval(options_);
}

absl::Status Coordinator::AwaitMemberSilenceLocked(
    const proto::JoinRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const absl::Duration quiet = 2 * HeartbeatInterval(options_);
  while (true) {
    const int rank = RankOfLocked(request);
    if (rank < 0) return absl::OkStatus();
    const Member& m = members_[rank];
    // Not heard from yet: the same node asking again (LateJoinLocked).
    if (!AliveLocked(m)) return absl::OkStatus();
    const absl::Duration silent = clock_->Now() - m.last_heartbeat;
    const absl::Time now = absl::Now();
    if (now >= deadline || shutdown_ || (cancelled && cancelled())) {
      metrics_.calls_refused->WithLabels({"Join"})->Increment();
      const absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
          "node ", request.hostname(), " (", request.data_address(),
          ") cannot take the place of ", DescribeLocked(rank),
          ": that member is alive (its last heartbeat ", Seconds(silent),
          " ago, and none of its peers saw it vanish); a node restarted in "
          "its place is taken once the old one has been silent for ",
          Seconds(quiet), " (two heartbeat periods)"));
      STARLING_LOG(WARNING) << "refused: " << refused.message();
      return refused;
    }
    changed_.WaitWithDeadline(&mu_,
                              std::min(deadline, now + kCancelPollInterval));
    DetectFailuresLocked();
  }
}

absl::StatusOr<std::optional<proto::JoinResponse>> Coordinator::LateJoinLocked(
    const proto::JoinRequest& request) {
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    Member& m = members_[rank];
    if (m.join.data_address() != request.data_address()) continue;
    if (m.join.hostname() != request.hostname()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "node ", request.hostname(), " cannot join with data address ",
          request.data_address(), ": it is ", DescribeLocked(rank),
          "'s in group epoch ", group_epoch_));
    }
    // The same node asking again (its first answer was lost) gets the same
    // answer, until it is heard from (then it has it).
    if (m.health != proto::NODE_HEALTH_LOST && !m.heard_from) {
      return std::optional<proto::JoinResponse>(
          JoinResponseLocked(static_cast<int>(rank)));
    }
    // Otherwise it restarted: its old self is gone, whatever the grace.
    if (m.health != proto::NODE_HEALTH_LOST) {
      MarkLostLocked(static_cast<int>(rank),
                     "restarted (it joined afresh while a member)");
    }
    m.lost_since = absl::InfinitePast();
    return std::optional<proto::JoinResponse>();
  }
  int staying = 0;
  for (const Member& m : members_) {
    staying += m.health != proto::NODE_HEALTH_LOST ? 1 : 0;
  }
  if (staying + static_cast<int>(pending_.size()) >= options_.expected_nodes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job '", options_.job_id, "' has its full group of ",
        options_.expected_nodes, " nodes (group epoch ", group_epoch_,
        ", --expected_nodes); node ", request.hostname(), " (",
        request.data_address(), ") cannot join"));
  }
  return std::optional<proto::JoinResponse>();
}

void Coordinator::FormGroupLocked() {
  std::vector<PendingJoin> joins;
  joins.swap(pending_);
  InstallGroupLocked({}, std::move(joins));
  reformed_because_.clear();
  STARLING_LOG(INFO) << "job '" << options_.job_id << "' formed a group of "
                     << members_.size() << " nodes (epoch " << group_epoch_
                     << ", "
                     << (options_.parameter_count == 0
                             ? std::string("parameters as declared")
                             : absl::StrCat(options_.parameter_count,
                                            " parameters"))
                     << ", " << planner_->total_workers() << " workers, "
                     << planner_->iterations_per_epoch()
                     << " iterations per epoch)";
  LogRanksLocked();
}

void Coordinator::LogRanksLocked() const {
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    STARLING_LOG(INFO) << "  " << DescribeLocked(static_cast<int>(rank))
                       << " shard [" << shard_map_[rank].begin_element() << ", "
                       << shard_map_[rank].end_element() << ")";
  }
}

void Coordinator::InstallGroupLocked(std::vector<Member> survivors,
                                     std::vector<PendingJoin> joins) {
  const absl::Time now = clock_->Now();
  for (PendingJoin& join : joins) {
    Member member;
    member.join = std::move(join.request);
    member.join.clear_wait_timeout_ms();
    survivors.push_back(std::move(member));
  }
  std::vector<Member> group = std::move(survivors);
  std::sort(group.begin(), group.end(), [](const Member& a, const Member& b) {
    return std::tie(a.join.hostname(), a.join.data_address()) <
           std::tie(b.join.hostname(), b.join.data_address());
  });
  const int n = static_cast<int>(group.size());
  shard_map_ = ComputeShardMap(options_.parameter_count, n);
  members_.clear();
  for (int rank = 0; rank < n; ++rank) {
    // A member carried over keeps who it is and whether it re-registered
    // since a coordinator restart; the rest starts afresh in the epoch.
    Member member;
    member.join = std::move(group[rank].join);
    member.health = group[rank].health;
    member.registered = group[rank].registered;
    member.carried_over = group[rank].carried_over;
    member.local_workers = LocalWorkers(member.join);
    // A member carried over keeps its silence and its suspicion: one that
    // died with the others is found on its own schedule, not a timeout
    // later.
    member.last_heartbeat =
        member.carried_over ? group[rank].last_heartbeat : now;
    member.suspected_at = group[rank].suspected_at;
    member.suspected_by = group[rank].suspected_by;
    member.shard_elements =
        shard_map_[rank].end_element() - shard_map_[rank].begin_element();
    members_.push_back(std::move(member));
  }
  RebuildPlannerLocked();
  formed_ = true;
  // Above every epoch before it, those of groups given up included.
  ++group_epoch_;
  group_key_.assign(kGroupKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(group_key_.data()),
                 static_cast<int>(group_key_.size())) != 1) {
    group_key_.clear();
    STARLING_LOG(WARNING)
        << "no random bytes for the group key (OpenSSL RAND_bytes failed): "
           "data-plane peers authenticate only with a cluster secret, if any";
  }
  reform_blocked_.clear();
  UpdateGroupGaugesLocked();
  MarkDirtyLocked();
  changed_.SignalAll();
}

bool Coordinator::ReformIfDueLocked() {
  if (!formed_ || restored_ || shutdown_) return false;
  const absl::Time now = clock_->Now();
  bool drop_due = false;
  bool lost_in_grace = false;
  for (const Member& m : members_) {
    if (m.health != proto::NODE_HEALTH_LOST) continue;
    if (now - m.lost_since >= options_.rejoin_grace) {
      drop_due = true;
    } else {
      lost_in_grace = true;
    }
  }
  if (!drop_due) {
    // A member back within its grace (its peers' connections to it are
    // gone), or nodes to take in: between runs, or into a run that can go
    // on with them; not while a LOST member may still come back.
    const bool taking_in = !pending_.empty() &&
                           (runs_.current() == nullptr ? begin_waiting_.empty()
                                                       : CanCarryLocked());
    if (lost_in_grace || (came_back_.empty() && !taking_in)) return false;
  }
  // A member its peers saw vanish too is LOST or heard from within
  // SuspectSilence: one re-formation for nodes that died together.
  for (const Member& m : members_) {
    if (m.health != proto::NODE_HEALTH_LOST &&
        m.suspected_at != absl::InfiniteFuture()) {
      return false;
    }
  }
  // A run that can go on does, in the new group: the members that stay
  // carry its state between them (a lost one's shard from its buddy's
  // replica or the durable checkpoint) and send it to the nodes taken in
  // (a lost member restarted, a newcomer) and to members back without it.
  const bool carry = CanCarryLocked();
  // Every LOST member leaves (one still in its grace too: a group is not
  // re-formed around a member that does not answer).
  std::vector<Member> survivors;
  std::vector<std::string> changes;
  std::map<std::string, std::string> dropped;
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    const Member& m = members_[rank];
    if (m.health != proto::NODE_HEALTH_LOST) {
      survivors.push_back(m);
      survivors.back().carried_over = true;
      continue;
    }
    const std::string why =
        absl::StrCat(DescribeLocked(static_cast<int>(rank)), " of group epoch ",
                     group_epoch_, " dropped: ", m.lost_why);
    changes.push_back(why);
    dropped[m.join.data_address()] = why;
  }
  for (const PendingJoin& p : pending_) {
    changes.push_back(absl::StrCat("node ", p.request.hostname(), " (",
                                   p.request.data_address(), ") taken in"));
  }
  for (const std::string& back : came_back_) changes.push_back(back);
  const int n = static_cast<int>(survivors.size() + pending_.size());
  if (n < options_.min_nodes) {
    const std::string blocked =
        absl::StrCat("re-forming would leave ", n, " node", n == 1 ? "" : "s",
                     ", fewer than --min_nodes=", options_.min_nodes);
    if (drop_due && carry) {
      const uint64_t waiting = runs_.current()->run_id();
      if (runs_.FailCurrent(-1, blocked, clock_->Now())) {
        metrics_.runs_ended->WithLabels({"failed"})->Increment();
        STARLING_LOG(WARNING) << "run " << waiting << " failed: " << blocked;
      }
    }
    if (blocked != reform_blocked_) {
      reform_blocked_ = blocked;
      STARLING_LOG(WARNING) << "job '" << options_.job_id << "': " << blocked
                            << "; the group stays degraded until nodes join";
    }
    return false;
  }
  const uint64_t from = group_epoch_;
  const size_t was = members_.size();
  const char* const cause = drop_due           ? "node_lost"
                            : pending_.empty() ? "node_back"
                                               : "node_joined";
  const std::string changed = absl::StrJoin(changes, "; ");
  const std::string why = absl::StrCat("the group re-formed (epoch ", from,
                                       " -> ", from + 1, ": ", changed, ")");
  const uint64_t run_id =
      runs_.current() != nullptr ? runs_.current()->run_id() : 0;
  if (!carry && runs_.FailCurrent(-1, why, now)) {
    metrics_.runs_ended->WithLabels({"failed"})->Increment();
    STARLING_LOG(WARNING) << "run " << run_id << " failed: " << why;
  }
  carried_run_id_ = carry ? run_id : 0;
  suspended_since_ = absl::InfiniteFuture();
  suspended_on_.clear();
  for (const auto& [rank, call] : begin_waiting_) {
    begin_answers_.emplace(
        call.id, absl::UnavailableError(absl::StrCat(
                     "no run can begin in group epoch ", from, ": ", why)));
  }
  begin_waiting_.clear();
  std::vector<PendingJoin> joins;
  joins.swap(pending_);
  std::unique_ptr<SchedulePlanner> plan = std::move(planner_);
  InstallGroupLocked(std::move(survivors), std::move(joins));
  if (carry) {
    // The run goes on: its data schedule continues (RebaseScheduleLocked).
    planner_ = std::move(plan);
    schedule_rebase_pending_ = true;
  }
  dropped_ = std::move(dropped);
  came_back_.clear();
  reformed_because_ = changed;
  reformed_at_ = now;
  metrics_.reformations->WithLabels({cause})->Increment();
  STARLING_LOG(WARNING) << "job '" << options_.job_id << "': " << why << "; "
                        << was << " -> " << members_.size() << " nodes, "
                        << TotalWorkersLocked() << " workers";
  if (carry) {
    runs_.CarryOn(static_cast<int>(members_.size()), TotalWorkersLocked());
    STARLING_LOG(WARNING) << "run " << run_id << " goes on in group epoch "
                          << group_epoch_ << " on " << members_.size()
                          << " nodes, from its last committed step";
  }
  LogRanksLocked();
  return true;
}

std::vector<int> Coordinator::WorkersPerRankLocked() const {
  std::vector<int> workers_per_rank;
  for (const Member& m : members_) {
    workers_per_rank.push_back(std::max(1, m.local_workers));
  }
  return workers_per_rank;
}

int Coordinator::TotalWorkersLocked() const {
  int total = 0;
  for (int w : WorkersPerRankLocked()) total += w;
  return total;
}

bool Coordinator::PlanContinuedLocked() const {
  return planner_ != nullptr &&
         (planner_->continued() || schedule_rebase_pending_);
}

void Coordinator::RebuildPlannerLocked() {
  planner_ = std::make_unique<SchedulePlanner>(
      options_.partitions_per_epoch, options_.epochs,
      options_.iterations_per_schedule, WorkersPerRankLocked());
  schedule_rebase_pending_ = false;
}

absl::Status Coordinator::RebaseScheduleLocked(uint64_t next_iteration) {
  if (next_iteration < planner_->first_iteration()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "iteration ", next_iteration, " was planned for an earlier group; ",
        "this group's plan begins at iteration ", planner_->first_iteration()));
  }
  if (!schedule_rebase_pending_) return absl::OkStatus();
  planner_ = std::make_unique<SchedulePlanner>(*planner_, next_iteration,
                                               WorkersPerRankLocked());
  schedule_rebase_pending_ = false;
  STARLING_LOG(WARNING) << "the data schedule goes on from iteration "
                        << next_iteration << " (epoch "
                        << planner_->EpochOf(next_iteration) << ") over the "
                        << planner_->total_workers()
                        << " workers of group epoch " << group_epoch_
                        << ": the epoch's unread partitions first, "
                        << planner_->total_iterations() << " iterations in all";
  MarkDirtyLocked();
  return absl::OkStatus();
}

// --- Re-registration after a coordinator restart ----------------------------

void Coordinator::AddAwaitedMemberLocked(proto::JoinRequest join,
                                         absl::Time now) {
  const size_t rank = members_.size();
  Member member;
  member.join = std::move(join);
  member.local_workers = LocalWorkers(member.join);
  member.health = proto::NODE_HEALTH_JOINING;
  member.registered = false;
  member.last_heartbeat = now;
  member.shard_elements =
      shard_map_[rank].end_element() - shard_map_[rank].begin_element();
  members_.push_back(std::move(member));
}

void Coordinator::AdoptGroupLocked(const proto::RejoinRequest& request) {
  const int n = request.peers_size();
  const absl::Time now = clock_->Now();
  if (request.shard_map_size() == n) {
    shard_map_.assign(request.shard_map().begin(), request.shard_map().end());
  } else {
    shard_map_ = ComputeShardMap(options_.parameter_count, n);
  }
  for (int rank = 0; rank < n; ++rank) {
    const proto::PeerInfo& peer = request.peers(rank);
    proto::JoinRequest join;
    join.set_job_id(options_.job_id);
    join.set_hostname(peer.hostname());
    join.set_data_address(peer.data_address());
    join.set_admin_address(peer.admin_address());
    AddAwaitedMemberLocked(std::move(join), now);
  }
  group_epoch_ = request.group_epoch();
  formed_ = true;
  adopted_from_ = absl::StrCat("the coordinator adopted the running group of ",
                               n, " nodes (group epoch ", group_epoch_,
                               ") that rank ", request.rank(), " (",
                               request.node().hostname(), ") re-registered");
  // Joins still waiting for a fresh group cannot have one now.
  pending_.clear();
  STARLING_LOG(WARNING) << "job '" << options_.job_id << "': " << adopted_from_
                        << " after a restart; waiting for the other members "
                           "to re-register";
}

absl::Status Coordinator::CheckSameGroupLocked(
    const proto::RejoinRequest& request) const {
  bool same = request.group_epoch() == group_epoch_ &&
              request.peers_size() == static_cast<int>(members_.size());
  for (int rank = 0; same && rank < request.peers_size(); ++rank) {
    same = request.peers(rank).data_address() ==
           members_[rank].join.data_address();
  }
  if (same) return absl::OkStatus();
  std::vector<std::string> mine;
  for (const Member& m : members_) mine.push_back(m.join.data_address());
  std::vector<std::string> theirs;
  for (const proto::PeerInfo& p : request.peers()) {
    theirs.push_back(p.data_address());
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", request.rank(), " (", request.node().hostname(),
      ") reports group epoch ", request.group_epoch(), " of ",
      request.peers_size(), " nodes [", absl::StrJoin(theirs, ", "),
      "], but this coordinator runs group epoch ", group_epoch_, " of ",
      members_.size(), " nodes [", absl::StrJoin(mine, ", "), "]"));
}

absl::StatusOr<proto::JoinResponse> Coordinator::Rejoin(
    const proto::RejoinRequest& request) {
  const proto::JoinRequest& node = request.node();
  const int rank = request.rank();
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(CheckNodeLocked(node, "re-registration"));
  if (rank < 0 || rank >= request.peers_size() ||
      request.peers(rank).data_address() != node.data_address() ||
      request.group_epoch() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "re-registration from node ", node.hostname(), " (",
        node.data_address(), ") as rank ", rank, " of group epoch ",
        request.group_epoch(), " lists ", request.peers_size(),
        " peers; its rank must be one of them, with its own data address, "
        "and the epoch >= 1"));
  }
  // A key for this node only where none is held (a record without keys)
  // or the member was lost: a live member has its own, and a Rejoin in its
  // name (with the shared secret) gets none.
  const bool keyed = member_keys_.contains(MemberKeyName(node));
  if (formed_ && request.group_epoch() < group_epoch_) {
    absl::StatusOr<proto::JoinResponse> moved =
        MoveToCurrentEpochLocked(request);
    if (moved.ok() && !keyed) IssueMemberKeyLocked(node, &*moved);
    return moved;
  }
  if (!formed_ && request.group_epoch() <= group_epoch_) {
    // This coordinator recorded that epoch, or a later one, and gave it up.
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", rank, " (", node.hostname(), ") reports group epoch ",
        request.group_epoch(), ", which this coordinator gave up (its record ",
        "is at epoch ", group_epoch_, "); the node joins afresh"));
  }
  if (!formed_) {
    if (request.peers_size() != options_.expected_nodes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " (", node.hostname(), ") reports a running group of ",
          request.peers_size(), " nodes, but this coordinator forms groups of ",
          options_.expected_nodes, " (--expected_nodes)"));
    }
    AdoptGroupLocked(request);
  } else {
    STARLING_RETURN_IF_ERROR(CheckSameGroupLocked(request));
    // A live member re-registers as it is (its heartbeat was refused, say);
    // an entry that differs (another admin address, say) while the member
    // lives is someone else's.
    const Member& m = members_[rank];
    const proto::JoinRequest& entry = m.join;
    const bool same = entry.hostname() == node.hostname() &&
                      entry.data_address() == node.data_address() &&
                      entry.admin_address() == node.admin_address() &&
                      entry.version() == node.version() &&
                      LocalWorkers(entry) == LocalWorkers(node);
    if (m.registered && !same && AliveLocked(m)) {
      metrics_.calls_refused->WithLabels({"Rejoin"})->Increment();
      const absl::Status refused = absl::FailedPreconditionError(absl::StrCat(
          "re-registration of ", DescribeLocked(rank), " with admin address '",
          BoundedPrintable(node.admin_address(), 64),
          "' refused: that member "
          "is alive (heartbeating, none of its peers saw it vanish) and "
          "registered with admin address '",
          entry.admin_address(), "'; a live member's entry is not rewritten"));
      STARLING_LOG(WARNING) << "refused: " << refused.message();
      return refused;
    }
  }
  const proto::NodeHealth was = members_[rank].health;
  const bool was_registered = members_[rank].registered;
  RegisterLocked(rank, node, request.run(), request.highest_run_id());
  if (!was_registered || was != proto::NODE_HEALTH_HEALTHY) {
    int registered = 0;
    for (const Member& m : members_) registered += m.registered ? 1 : 0;
    STARLING_LOG(INFO) << DescribeLocked(rank) << " re-registered"
                       << (was == proto::NODE_HEALTH_LOST ? " (was LOST)" : "")
                       << " with group epoch " << group_epoch_
                       << (request.run().run_id() != 0
                               ? absl::StrCat(", in run ",
                                              request.run().run_id())
                               : std::string())
                       << "; " << registered << " of " << members_.size()
                       << " members registered";
  }
  proto::JoinResponse response = JoinResponseLocked(rank);
  if (!keyed || was == proto::NODE_HEALTH_LOST) {
    IssueMemberKeyLocked(node, &response);
  }
  return response;
}

void Coordinator::IssueMemberKeyLocked(const proto::JoinRequest& node,
                                       proto::JoinResponse* response) {
  if (options_.cluster_secret.empty()) return;
  std::string key(kGroupKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()),
                 static_cast<int>(key.size())) != 1) {
    // The node goes on signing with the shared secret, which is refused
    // once its identity holds a key: say why.
    STARLING_LOG(ERROR) << "no random bytes for the member key of "
                        << node.hostname() << " (" << node.data_address()
                        << "): OpenSSL RAND_bytes failed";
    return;
  }
  member_keys_[MemberKeyName(node)] = key;
  response->set_member_key(std::move(key));
  MarkDirtyLocked();
}

int Coordinator::RankOfLocked(const proto::JoinRequest& node) const {
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    if (members_[rank].join.data_address() == node.data_address() &&
        members_[rank].join.hostname() == node.hostname()) {
      return static_cast<int>(rank);
    }
  }
  return -1;
}

void Coordinator::RegisterLocked(int rank, const proto::JoinRequest& node,
                                 const proto::RunStatus& run,
                                 uint64_t highest_run_id) {
  Member& member = members_[rank];
  member.join = node;
  member.join.clear_wait_timeout_ms();
  member.local_workers = LocalWorkers(node);
  member.registered = true;
  member.health = proto::NODE_HEALTH_HEALTHY;
  member.last_heartbeat = clock_->Now();
  member.run = run;
  runs_.Adopt(run, highest_run_id, static_cast<int>(members_.size()));
  restored_ = false;
  // A plan the record continued (a run that went on) stays.
  if (!PlanContinuedLocked()) RebuildPlannerLocked();
  UpdateGroupGaugesLocked();
  MarkDirtyLocked();
  changed_.SignalAll();
}

absl::StatusOr<proto::JoinResponse> Coordinator::MoveToCurrentEpochLocked(
    const proto::RejoinRequest& request) {
  const proto::JoinRequest& node = request.node();
  const int rank = RankOfLocked(node);
  if (rank >= 0 && members_[rank].carried_over && !members_[rank].heard_from) {
    // Its run was of the old group; it begins the next one in this.
    RegisterLocked(rank, node, proto::RunStatus(), request.highest_run_id());
    STARLING_LOG(INFO) << "rank " << request.rank() << " of group epoch "
                       << request.group_epoch() << " (" << node.hostname()
                       << ") is " << DescribeLocked(rank) << " of group epoch "
                       << group_epoch_;
    return JoinResponseLocked(rank);
  }
  const auto dropped = dropped_.find(node.data_address());
  return absl::FailedPreconditionError(absl::StrCat(
      "rank ", request.rank(), " (", node.hostname(), ", ", node.data_address(),
      ") of group epoch ", request.group_epoch(),
      " is not a member of group epoch ", group_epoch_,
      dropped != dropped_.end()
          ? absl::StrCat(" (", dropped->second, ")")
          : std::string(" (the group re-formed without it)"),
      "; it joins afresh"));
}

// --- The state file ----------------------------------------------------------

void Coordinator::MarkDirtyLocked() {
  if (persister_ != nullptr) persister_->Changed();
}

absl::Status Coordinator::FlushStateForTesting(absl::Time deadline) {
  if (persister_ == nullptr) return absl::OkStatus();
  return persister_->Flush(deadline);
}

proto::CoordinatorState Coordinator::Snapshot() const {
  proto::CoordinatorState state;
  absl::MutexLock lock(&mu_);
  state.set_job_id(options_.job_id);
  state.set_version(options_.version);
  state.set_checkpoint_incarnation(options_.checkpoint_incarnation);
  state.set_group_epoch(group_epoch_);
  if (formed_) {
    state.set_group_key(group_key_);
    for (const Member& m : members_) *state.add_members() = m.join;
    for (const proto::ShardRange& range : shard_map_) {
      *state.add_shard_map() = range;
    }
  }
  *state.mutable_runs() = runs_.Save();
  if (highest_iteration_.has_value()) {
    state.set_has_highest_iteration(true);
    state.set_highest_iteration(*highest_iteration_);
  }
  state.set_last_error(last_error_);
  state.set_carried_run_id(carried_run_id_);
  for (const auto& [name, key] : member_keys_) {
    (*state.mutable_member_keys())[name] = key;
  }
  if (formed_ && PlanContinuedLocked()) {
    for (const proto::ScheduleSegment& segment : planner_->Segments()) {
      *state.add_schedule_segments() = segment;
    }
    state.set_schedule_rebase_pending(schedule_rebase_pending_);
  }
  return state;
}

void Coordinator::RestoreLocked(const proto::CoordinatorState& state) {
  group_epoch_ = state.group_epoch();
  runs_.Restore(state.runs());
  last_error_ = state.last_error();
  carried_run_id_ = state.carried_run_id();
  member_keys_.clear();
  for (const auto& [name, key] : state.member_keys()) {
    member_keys_[name] = key;
  }
  if (state.has_highest_iteration()) {
    highest_iteration_ = state.highest_iteration();
  }
  const int n = state.members_size();
  if (n == 0) return;  // no group had formed
  shard_map_.assign(state.shard_map().begin(), state.shard_map().end());
  if (static_cast<int>(shard_map_.size()) != n) {
    shard_map_ = ComputeShardMap(options_.parameter_count, n);
  }
  const absl::Time now = clock_->Now();
  for (int rank = 0; rank < n; ++rank) {
    AddAwaitedMemberLocked(state.members(rank), now);
  }
  group_key_ = state.group_key();
  formed_ = true;
  restored_ = true;
  RebuildPlannerLocked();
  if (state.schedule_segments_size() > 0) {
    SchedulePlanner recorded = *planner_;
    if (SchedulePlanner::FromSegments(options_.partitions_per_epoch,
                                      options_.epochs,
                                      options_.iterations_per_schedule,
                                      {state.schedule_segments().begin(),
                                       state.schedule_segments().end()},
                                      &recorded)) {
      planner_ = std::make_unique<SchedulePlanner>(std::move(recorded));
      schedule_rebase_pending_ = state.schedule_rebase_pending();
    } else {
      STARLING_LOG(WARNING) << "the recorded data schedule does not make a "
                               "plan; planning afresh for the members";
    }
  }
  UpdateGroupGaugesLocked();
  adopted_from_ =
      absl::StrCat("the coordinator resumed the group of ", n,
                   " nodes (group epoch ", group_epoch_, ") it recorded");
  STARLING_LOG(WARNING) << "job '" << options_.job_id
                        << "': resumed group epoch " << group_epoch_ << " of "
                        << n << " nodes and " << runs_.next_run_id() - 1
                        << " run(s) from " << options_.state_where
                        << "; waiting for the members to re-register";
}

absl::Status Coordinator::SettleRestoredGroupLocked(
    const proto::JoinRequest& request, absl::Time deadline,
    const std::function<bool()>& cancelled) {
  const std::string who = absl::StrCat("node ", request.hostname(), " (",
                                       request.data_address(), ")");
  while (formed_ && restored_) {
    DetectFailuresLocked();
    bool member = false;
    bool all_lost = true;
    for (const Member& m : members_) {
      member |= m.join.data_address() == request.data_address() &&
                m.join.hostname() == request.hostname();
      all_lost &= m.health == proto::NODE_HEALTH_LOST;
    }
    if (member || all_lost) {
      GiveUpRestoredGroupLocked(absl::StrCat(
          who,
          member ? " joined afresh: it is a member restarted, not re-registered"
                 : " joined after every member was LOST"));
      return absl::OkStatus();
    }
    if (shutdown_)
      return absl::UnavailableError("coordinator is shutting down");
    const absl::Time now = absl::Now();
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat(
          who,
          " cancelled its join while the resumed group waited for its "
          "members to re-register"));
    }
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(who, " cannot join yet: ", adopted_from_,
                       " and waits up to --heartbeat_timeout (",
                       Seconds(options_.heartbeat_timeout),
                       ") for its members to re-register"));
    }
    changed_.WaitWithDeadline(&mu_,
                              std::min(deadline, now + kCancelPollInterval));
  }
  return absl::OkStatus();
}

void Coordinator::GiveUpRestoredGroupLocked(const std::string& why) {
  STARLING_LOG(WARNING) << "job '" << options_.job_id
                        << "': giving up the resumed group epoch "
                        << group_epoch_ << " (no member re-registered; " << why
                        << "); the next group forms with epoch "
                        << group_epoch_ + 1;
  const uint64_t run_id =
      runs_.current() != nullptr ? runs_.current()->run_id() : 0;
  if (runs_.FailCurrent(
          -1,
          absl::StrCat("group epoch ", group_epoch_, " was given up: ", why),
          clock_->Now())) {
    metrics_.runs_ended->WithLabels({"failed"})->Increment();
    STARLING_LOG(WARNING) << "run " << run_id << " failed with it";
  }
  formed_ = false;
  restored_ = false;
  members_.clear();
  shard_map_.clear();
  group_key_.clear();
  planner_.reset();
  adopted_from_.clear();
  UpdateGroupGaugesLocked();
  MarkDirtyLocked();
  changed_.SignalAll();
}

proto::JoinResponse Coordinator::JoinResponseLocked(int rank) const {
  proto::JoinResponse response;
  response.set_rank(rank);
  response.set_group_size(static_cast<int32_t>(members_.size()));
  response.set_group_epoch(group_epoch_);
  response.set_group_key(group_key_);
  response.set_reformed_because(reformed_because_);
  response.set_carried_run_id(carried_run_id_);
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
  *response.mutable_config() = JobConfigFor(options_);
  return response;
}

// --- Membership and failure detection ---------------------------------------

std::string Coordinator::DescribeLocked(int rank) const {
  const Member& m = members_[rank];
  return absl::StrCat("rank ", rank, " (", m.join.hostname(), ", ",
                      m.join.data_address(), ")");
}

absl::StatusOr<Coordinator::Member*> Coordinator::MemberLocked(
    int rank, uint64_t group_epoch, absl::string_view what) {
  if (!formed_) {
    return absl::NotFoundError(absl::StrCat(
        what, " from rank ", rank, ", but this coordinator has no group yet (",
        RendezvousProgressLocked(),
        "); a member of a running group re-registers (Rejoin)"));
  }
  // The epoch first: the ranks of another epoch are other ranks.
  if (group_epoch != 0 && group_epoch != group_epoch_) {
    metrics_.stale_calls->Increment();
    return absl::NotFoundError(
        absl::StrCat(what, " from rank ", rank, " of group epoch ", group_epoch,
                     ", but this coordinator runs group epoch ", group_epoch_,
                     "; re-register (Rejoin)"));
  }
  if (rank < 0 || rank >= static_cast<int>(members_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " from rank ", rank, ", but the group has ranks 0..",
                     members_.size() - 1));
  }
  Member* member = &members_[rank];
  if (!member->registered) {
    return absl::NotFoundError(absl::StrCat(
        what, " from ", DescribeLocked(rank),
        ", which has not re-registered since the coordinator restarted; "
        "re-register (Rejoin)"));
  }
  return member;
}

absl::StatusOr<Coordinator::Member*> Coordinator::LiveMemberLocked(
    int rank, uint64_t group_epoch, absl::string_view what) {
  STARLING_ASSIGN_OR_RETURN(Member * member,
                            MemberLocked(rank, group_epoch, what));
  if (member->health == proto::NODE_HEALTH_LOST) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " from ", DescribeLocked(rank),
        ", which is marked lost; its next heartbeat makes it healthy again"));
  }
  return member;
}

std::vector<int> Coordinator::LostRanksLocked() const {
  std::vector<int> lost;
  for (size_t rank = 0; rank < members_.size(); ++rank) {
    if (members_[rank].health == proto::NODE_HEALTH_LOST) {
      lost.push_back(static_cast<int>(rank));
    }
  }
  return lost;
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
    if (silent > options_.heartbeat_timeout) {
      newly_lost.push_back(static_cast<int>(rank));
      MarkLostLocked(
          static_cast<int>(rank),
          absl::StrCat(m.registered ? "no heartbeat" : "did not re-register",
                       " for ", Seconds(silent), " (timeout ",
                       Seconds(options_.heartbeat_timeout), ")"));
    } else if (m.suspected_at != absl::InfiniteFuture() &&
               silent > SuspectSilence(options_)) {
      newly_lost.push_back(static_cast<int>(rank));
      MarkLostLocked(
          static_cast<int>(rank),
          absl::StrCat("vanished from the data plane of ", m.suspected_by,
                       " and no heartbeat for ", Seconds(silent), " (every ",
                       Seconds(HeartbeatInterval(options_)), ")"));
    }
  }
  CheckSuspendedLocked(now);
  ReformIfDueLocked();
  return newly_lost;
}

namespace {

// What a caller says of itself reaches logs and errors: bounded, printable.
std::string Who(const Coordinator::Caller& caller) {
  if (caller.host.empty() && caller.address.empty()) {
    return "a caller that did not say who it is";
  }
  if (caller.address.empty()) return BoundedPrintable(caller.host, 64);
  return absl::StrCat(BoundedPrintable(caller.host, 64), " (",
                      BoundedPrintable(caller.address, 64), ")");
}

}  // namespace

absl::Status Coordinator::CheckCaller(absl::string_view call,
                                      const Caller& caller, int rank,
                                      uint64_t epoch) {
  if (!options_.certified_identities && options_.cluster_secret.empty()) {
    return absl::OkStatus();
  }
  const std::string who = Who(caller);
  absl::Status refused;
  if (options_.certified_identities &&
      std::find(caller.certified.begin(), caller.certified.end(),
                caller.host) == caller.certified.end()) {
    std::vector<std::string> names;
    for (const std::string& name : caller.certified) {
      names.push_back(BoundedPrintable(name, 64));
    }
    refused = absl::PermissionDeniedError(absl::StrCat(
        call, " from ", who, " refused: its client certificate names [",
        absl::StrJoin(names, ", "),
        "], not the hostname it claims; a node speaks only for the host its "
        "certificate names"));
  }
  if (refused.ok() && !options_.cluster_secret.empty()) {
    // Join and Rejoin prove the shared secret; every other call the
    // member's own key, once it has one.
    std::string member_key;
    if (!SignedWithClusterSecret(call)) {
      absl::MutexLock lock(&mu_);
      const auto it =
          member_keys_.find(MemberKeyName(caller.host, caller.address));
      if (it != member_keys_.end()) member_key = it->second;
    }
    const absl::string_view secrets[] = {
        member_key.empty() ? absl::string_view(options_.cluster_secret)
                           : absl::string_view(member_key)};
    refused =
        verifier_.Verify(secrets, CallRole::kMember, call, options_.job_id,
                         CallIdentity{caller.host, caller.address},
                         caller.credential, absl::Now());
    if (!refused.ok()) {
      refused = absl::Status(
          refused.code(),
          absl::StrCat(
              call, " from ", who, " refused: ", refused.message(),
              caller.credential.empty()
                  ? "; this coordinator runs with a cluster secret: "
                    "start the node with --cluster_secret_file (the "
                    "coordinator's file)"
              : !member_key.empty()
                  ? absl::StrCat("; ", BoundedPrintable(caller.host, 64),
                                 " signs its calls with the member key this "
                                 "coordinator gave it (the cluster secret "
                                 "proves Join and Rejoin only)")
                  : ""));
    }
  }
  if (refused.ok() && rank >= 0) {
    absl::MutexLock lock(&mu_);
    // A call without an epoch is taken as the current group's (the
    // handlers do), so it is bound as one.
    if ((epoch == 0 || epoch == group_epoch_) &&
        rank < static_cast<int>(members_.size())) {
      const proto::JoinRequest& member = members_[rank].join;
      if (member.hostname() != caller.host ||
          member.data_address() != caller.address) {
        refused = absl::PermissionDeniedError(
            absl::StrCat(call, " for rank ", rank, " (", member.hostname(),
                         ", ", member.data_address(), ") from ", who,
                         ": a member speaks only for itself"));
      }
    }
  }
  if (!refused.ok()) {
    metrics_.calls_refused->WithLabels({std::string(call)})->Increment();
    STARLING_LOG(WARNING) << "refused: " << refused.message();
  }
  return refused;
}

absl::Status Coordinator::CheckOperator(absl::string_view call,
                                        const Caller& caller) {
  const absl::Status refused = verifier_.VerifyOperator(
      options_.operator_secret, options_.cluster_secret, call, call,
      caller.host, caller.credential, "this coordinator", absl::Now());
  if (refused.ok()) return refused;
  metrics_.calls_refused->WithLabels({std::string(call)})->Increment();
  STARLING_LOG(WARNING) << "refused: " << refused.message();
  return refused;
}

bool Coordinator::CanCarryLocked() const {
  if (runs_.current() == nullptr) return false;
  const proto::JobConfig config = JobConfigFor(options_);
  if (proto::UsesShardOwners(config.mode())) {
    // The shard owners: each lost shard from its buddy's replica.
    return config.replicas() > 0;
  }
  // Plain all-reduce runs (optimizer "none") hold no state a loss can
  // take; the others take each lost shard from its buddy's replica, or
  // (both lost, or no replicas) every shard from the newest durable
  // checkpoint.
  return config.optimizer() == "none" || config.replicas() > 0 ||
         proto::WritesCheckpoints(config);
}

void Coordinator::CheckSuspendedLocked(absl::Time now) {
  if (suspended_since_ == absl::InfiniteFuture()) return;
  if (runs_.current() == nullptr) {
    suspended_since_ = absl::InfiniteFuture();
    return;
  }
  for (const Member& m : members_) {
    if (m.health == proto::NODE_HEALTH_LOST) return;  // a re-formation is due
  }
  if (now - suspended_since_ < 2 * options_.heartbeat_timeout) return;
  const std::string error = absl::StrCat(
      suspended_on_, " and no member was lost within ",
      Seconds(2 * options_.heartbeat_timeout), ": nothing carries it on");
  const uint64_t run_id = runs_.current()->run_id();
  suspended_since_ = absl::InfiniteFuture();
  if (runs_.FailCurrent(-1, error, now)) {
    metrics_.runs_ended->WithLabels({"failed"})->Increment();
    STARLING_LOG(WARNING) << "run " << run_id << " failed: " << error;
    MarkDirtyLocked();
  }
}

void Coordinator::MarkLostLocked(int rank, const std::string& why) {
  const absl::Time now = clock_->Now();
  Member& m = members_[rank];
  m.health = proto::NODE_HEALTH_LOST;
  m.lost_since = now;
  last_error_ = absl::StrCat(DescribeLocked(rank), " lost: ", why);
  m.lost_why = why;
  STARLING_LOG(ERROR) << last_error_ << "; the group is degraded"
                      << (options_.rejoin_grace > absl::ZeroDuration()
                              ? absl::StrCat(" (it keeps its rank for ",
                                             Seconds(options_.rejoin_grace),
                                             ", --rejoin_grace)")
                              : std::string());
  metrics_.node_failures->Increment();
  const uint64_t run_id =
      runs_.current() != nullptr ? runs_.current()->run_id() : 0;
  if (CanCarryLocked()) {
    // Every shard of a lost member is also on its buddy: the run goes on
    // once the group re-forms without it (ReformIfDueLocked decides).
    STARLING_LOG(WARNING) << "run " << run_id << " waits for the group to "
                          << "re-form without " << DescribeLocked(rank)
                          << " and goes on from its last committed step";
  } else if (runs_.FailCurrent(rank, last_error_, now)) {
    metrics_.runs_ended->WithLabels({"failed"})->Increment();
    STARLING_LOG(ERROR) << "run " << run_id << " failed: " << last_error_;
  }
  UpdateGroupGaugesLocked();
  MarkDirtyLocked();
  // BeginRun waiters fail at once naming the lost ranks.
  changed_.SignalAll();
}

void Coordinator::UpdateGroupGaugesLocked() {
  int healthy = 0;
  bool degraded = false;
  for (const Member& m : members_) {
    healthy += m.health == proto::NODE_HEALTH_HEALTHY ? 1 : 0;
    degraded |= m.health == proto::NODE_HEALTH_LOST;
  }
  metrics_.group_size->Set(healthy);
  metrics_.degraded->Set(degraded ? 1 : 0);
  metrics_.group_epoch->Set(static_cast<double>(formed_ ? group_epoch_ : 0));
}

void Coordinator::NoteIterationLocked(Member* member, uint64_t iteration) {
  member->last_iteration =
      std::max(member->last_iteration.value_or(0), iteration);
  if (!highest_iteration_.has_value() || iteration > *highest_iteration_) {
    highest_iteration_ = iteration;
    metrics_.iteration->Set(static_cast<double>(iteration));
    metrics_.epoch->Set(static_cast<double>(planner_->EpochOf(iteration)));
  }
}

void Coordinator::UpdateWorkerGaugesLocked(
    int rank, const std::vector<proto::WorkerStatus>& workers) {
  int attached = 0;
  int missing = 0;
  int finished = 0;
  for (const proto::WorkerStatus& w : workers) {
    switch (w.state()) {
      case proto::WorkerStatus::STATE_ATTACHED:
        ++attached;
        break;
      case proto::WorkerStatus::STATE_MISSING:
        ++missing;
        break;
      case proto::WorkerStatus::STATE_FINISHED:
        ++finished;
        break;
      default:
        break;  // an empty slot
    }
  }
  const std::string r = absl::StrCat(rank);
  metrics_.workers->WithLabels({r, "attached"})->Set(attached);
  metrics_.workers->WithLabels({r, "missing"})->Set(missing);
  metrics_.workers->WithLabels({r, "finished"})->Set(finished);
}

absl::StatusOr<proto::HeartbeatResponse> Coordinator::Heartbeat(
    const proto::HeartbeatRequest& request) {
  STARLING_RETURN_IF_ERROR(CheckJobId(
      request.job_id(), absl::StrCat("heartbeat from rank ", request.rank())));
  absl::MutexLock lock(&mu_);
  // The sender proves itself alive before the others are judged.
  STARLING_ASSIGN_OR_RETURN(
      Member * member,
      MemberLocked(request.rank(), request.group_epoch(), "heartbeat"));
  const absl::Time now = clock_->Now();
  if (member->health == proto::NODE_HEALTH_LOST) {
    STARLING_LOG(WARNING) << DescribeLocked(request.rank()) << " is back after "
                          << Seconds(now - member->last_heartbeat)
                          << " without a heartbeat; healthy again, and the "
                             "group re-forms with it (its peers dropped it "
                             "from the data plane)";
    member->health = proto::NODE_HEALTH_HEALTHY;
    // Its peers aborted their connections to it: the data plane of this
    // epoch cannot carry a run with it again, one of the next can.
    came_back_.push_back(absl::StrCat(DescribeLocked(request.rank()),
                                      " back after ",
                                      Seconds(now - member->last_heartbeat)));
    UpdateGroupGaugesLocked();
  }
  member->last_heartbeat = now;
  member->heard_from = true;
  // It is alive, whatever a peer saw.
  member->suspected_at = absl::InfiniteFuture();
  for (int suspect : request.peers_vanished()) {
    if (suspect < 0 || suspect >= static_cast<int>(members_.size()) ||
        suspect == request.rank()) {
      continue;
    }
    Member& s = members_[suspect];
    if (s.health == proto::NODE_HEALTH_LOST ||
        s.suspected_at != absl::InfiniteFuture()) {
      continue;
    }
    s.suspected_at = now;
    s.suspected_by = DescribeLocked(request.rank());
    STARLING_LOG(WARNING) << DescribeLocked(suspect)
                          << " vanished from the data plane of "
                          << s.suspected_by << "; LOST unless it heartbeats "
                          << "within "
                          << Seconds(std::max(absl::ZeroDuration(),
                                              SuspectSilence(options_) -
                                                  (now - s.last_heartbeat)));
  }
  NoteIterationLocked(member, request.iteration());
  member->reported_shard_bytes = request.shard_bytes();
  member->reported_optimizer_state_bytes = request.optimizer_state_bytes();
  member->workers.assign(request.workers().begin(), request.workers().end());
  UpdateWorkerGaugesLocked(request.rank(), member->workers);
  member->run = request.run();
  // Empty from a node whose plane of this epoch has not formed yet, or of
  // an earlier build: shown as not known.
  member->transport = request.transport();
  const proto::RunStatus& run = request.run();
  if (run.run_id() != 0) {
    runs_.NoteSteps(run.run_id(), run.steps());
    if (run.state() == proto::RunStatus::STATE_FAILED ||
        run.state() == proto::RunStatus::STATE_FINISHED) {
      // The node's own view of its run: a failure shows in status within
      // one heartbeat even if its EndRun is late.
      proto::EndRunRequest ended;
      ended.set_run_id(run.run_id());
      ended.set_state(run.state());
      ended.set_steps(run.steps());
      ended.set_failed_step(-1);
      ended.set_error(run.error());
      ended.set_suspended(run.suspended());
      EndRunLocked(request.rank(), ended);
    }
  }
  const proto::RunStatus reported = member->run;
  DetectFailuresLocked();
  if (request.group_epoch() != 0 && request.group_epoch() != group_epoch_) {
    // The group re-formed just now: the sender learns its new place by
    // re-registering, as any member of the old epoch does.
    return MemberLocked(request.rank(), request.group_epoch(), "heartbeat")
        .status();
  }

  proto::HeartbeatResponse response;
  response.set_group_epoch(group_epoch_);
  const std::vector<int> lost = LostRanksLocked();
  response.set_degraded(!lost.empty());
  for (int rank : lost) response.add_lost_ranks(rank);
  for (proto::RunFailure& failure :
       runs_.FailuresFor(request.rank(), reported)) {
    *response.add_failed_runs() = std::move(failure);
  }
  return response;
}

}  // namespace coordinator
}  // namespace starling
