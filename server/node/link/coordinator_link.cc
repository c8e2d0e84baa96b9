#include "server/node/link/coordinator_link.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/call_credential.h"
#include "server/base/coordinator_answers.h"
#include "server/base/grpc_status.h"
#include "server/base/listen_address.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/version.h"

namespace starling {
namespace node {
namespace {

// Trailing metadata on every answer of the coordinator itself
// (proto/coordinator.proto; coordinator_service.h kAnsweredByKey).
constexpr char kAnsweredByKey[] = "starling-answered-by";
// Pauses between attempts while the coordinator is unreachable: doubling
// from the first to the last. gRPC's own reconnection backoff is kept as
// short (channel arguments in Create).
constexpr absl::Duration kFirstRetry = absl::Milliseconds(100);
constexpr absl::Duration kMaxRetry = absl::Seconds(2);
// Reports kept while the coordinator cannot take them; the oldest go first.
constexpr size_t kMaxQueued = 256;
// Failed run ids remembered so that each is told once.
constexpr size_t kMaxToldFailures = 64;

std::string Cause(const grpc::Status& status) {
  return FromGrpcStatus(status).ToString();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorLink>> CoordinatorLink::Create(
    CoordinatorLinkOptions options, CoordinatorLinkCallbacks callbacks) {
  if (options.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "--coordinator is required (host:port of the job's coordinator)");
  }
  absl::StatusOr<HostPort> address = ParseHostPort(options.coordinator);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--coordinator=", options.coordinator, ": ",
                     address.status().message()));
  }
  if (address->port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--coordinator=", options.coordinator, ": port 0 is not an address"));
  }
  if (options.job_id.empty() || options.hostname.empty() ||
      options.data_address.empty()) {
    return absl::InvalidArgumentError(
        "the job id, hostname and data address of the node are required to "
        "join a coordinator");
  }
  if (options.local_workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local workers must be >= 0, not ", options.local_workers));
  }
  if (options.version.empty()) options.version = kStarlingVersion;
  grpc::ChannelArguments args;
  // gRPC's default reconnection backoff grows to two minutes; a restarted
  // coordinator must be found within a few heartbeats.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kFirstRetry)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kFirstRetry)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kMaxRetry)));
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentialsFor(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.coordinator, *credentials, args);
  return std::unique_ptr<CoordinatorLink>(new CoordinatorLink(
      std::move(options), std::move(callbacks), std::move(channel)));
}

CoordinatorLink::CoordinatorLink(CoordinatorLinkOptions options,
                                 CoordinatorLinkCallbacks callbacks,
                                 std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      channel_(std::move(channel)),
      stub_(proto::Coordinator::NewStub(channel_)) {
  identity_.set_job_id(options_.job_id);
  identity_.set_hostname(options_.hostname);
  identity_.set_data_address(options_.data_address);
  identity_.set_admin_address(options_.admin_address);
  identity_.set_version(options_.version);
  identity_.mutable_capabilities()->set_local_workers(options_.local_workers);
}

CoordinatorLink::~CoordinatorLink() { Stop(); }

void CoordinatorLink::Stop() {
  std::thread thread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
    changed_.SignalAll();
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();
}

CoordinatorLink::CallResult CoordinatorLink::Call(
    absl::string_view method, absl::Time deadline,
    const std::function<grpc::Status(grpc::ClientContext*)>& rpc,
    bool cancellable) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  // A fresh credential for this call (the coordinator takes each once):
  // Join and Rejoin prove the shared secret, every other call this
  // member's own key once it has one.
  std::string secret = options_.cluster_secret;
  bool under_member_key = false;
  if (!SignedWithClusterSecret(method)) {
    absl::MutexLock lock(&mu_);
    if (!member_key_.empty()) {
      secret = member_key_;
      under_member_key = true;
    }
  }
  if (absl::Status signed_call = SignContext(
          &context, secret, CallRole::kMember, method, options_.job_id,
          CallIdentity{options_.hostname, options_.data_address});
      !signed_call.ok()) {
    return {ToGrpcStatus(signed_call), Outcome::kFailed};
  }
  if (cancellable) {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return {
          grpc::Status(grpc::StatusCode::CANCELLED, "the daemon is stopping"),
          Outcome::kStopping};
    }
    in_flight_.insert(&context);
  }
  const grpc::Status status = rpc(&context);
  absl::MutexLock lock(&mu_);
  if (cancellable) in_flight_.erase(&context);
  if (stopping_ && cancellable && !status.ok()) {
    return {status, Outcome::kStopping};
  }
  if (under_member_key &&
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    // A coordinator that does not hold this member's key (restarted
    // without its record) refuses the calls signed under it: re-register,
    // proving the cluster secret, for a new one.
    return {status, Outcome::kRejoin};
  }
  return {status, Classify(status, context)};
}

bool CoordinatorLink::PauseUntil(absl::Time wake) {
  absl::MutexLock lock(&mu_);
  while (!stopping_ && absl::Now() < wake) {
    changed_.WaitWithDeadline(&mu_, wake);
  }
  return !stopping_;
}

CoordinatorLink::Outcome CoordinatorLink::Classify(
    const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return Outcome::kOk;
  const bool answered =
      context.GetServerTrailingMetadata().count(kAnsweredByKey) > 0;
  if (answered) {
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      return Outcome::kRejoin;
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        absl::StartsWith(status.error_message(),
                         "coordinator is shutting down")) {
      return Outcome::kRetry;
    }
    return Outcome::kFailed;
  }
  switch (status.error_code()) {
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return Outcome::kFailed;
    default:
      // Refused, reset, cancelled by a server going away, deadline: the
      // transport's, not the coordinator's word.
      return Outcome::kRetry;
  }
}

void CoordinatorLink::LogRetry(absl::Time* last, absl::string_view what,
                               const grpc::Status& status) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    // Stop() cancels calls in flight: nothing to report.
    if (stopping_ || now - *last < options_.retry_log_interval) return;
    *last = now;
  }
  STARLING_LOG(WARNING) << what << " at the coordinator "
                        << options_.coordinator
                        << " failed, retrying: " << Cause(status);
}

// --- Join -------------------------------------------------------------------

absl::StatusOr<proto::JoinResponse> CoordinatorLink::Join() {
  {
    absl::MutexLock lock(&mu_);
    if (joined_) {
      return absl::FailedPreconditionError(
          absl::StrCat("already joined job ", options_.job_id));
    }
  }
  const std::string what = absl::StrCat("joining job ", options_.job_id);
  STARLING_ASSIGN_OR_RETURN(proto::JoinResponse response,
                            AskToJoin(options_.join_timeout, what));

  absl::MutexLock lock(&mu_);
  if (stopping_) {
    return absl::CancelledError(absl::StrCat(what, ": the daemon is stopping"));
  }
  join_ = response;
  joined_ = true;
  const int64_t interval_ms = response.config().heartbeat_interval_ms();
  period_ = options_.heartbeat_interval > absl::ZeroDuration()
                ? options_.heartbeat_interval
            : interval_ms > 0 ? absl::Milliseconds(interval_ms)
                              : absl::Seconds(1);
  rpc_timeout_ = options_.rpc_timeout > absl::ZeroDuration()
                     ? options_.rpc_timeout
                     : std::max(period_, absl::Seconds(1));
  thread_ = std::thread([this] { HeartbeatLoop(); });
  STARLING_LOG(INFO) << "joined job " << options_.job_id << " as rank "
                     << response.rank() << " of " << response.group_size()
                     << " (group epoch " << response.group_epoch()
                     << ") at the coordinator " << options_.coordinator
                     << "; heartbeats every " << absl::FormatDuration(period_);
  return response;
}

absl::StatusOr<proto::JoinResponse> CoordinatorLink::AskToJoin(
    absl::Duration timeout, const std::string& what) {
  absl::Time deadline = absl::Now() + timeout;
  proto::JoinRequest request = identity_;
  absl::Time last_log = absl::InfinitePast();
  absl::Time last_wait_log = absl::InfinitePast();
  absl::Duration pause = kFirstRetry;
  // The first failure says why (a refused connection, a DNS failure); later
  // ones may only say that an attempt ran out of time.
  grpc::Status first_cause;
  proto::JoinResponse response;
  const absl::Status cancelled =
      absl::CancelledError(absl::StrCat(what, ": the daemon is stopping"));
  while (true) {
    request.set_wait_timeout_ms(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    const CallResult call =
        Call("Join", deadline, [&](grpc::ClientContext* context) {
          return stub_->Join(context, request, &response);
        });
    const grpc::Status& status = call.status;
    if (call.outcome == Outcome::kOk) {
      KeepMemberKey(response);
      return response;
    }
    if (call.outcome == Outcome::kStopping) return cancelled;
    if (call.outcome == Outcome::kFailed &&
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
        absl::StrContains(status.error_message(), kTakenInBetweenRuns)) {
      // The group runs and takes this node in when its run ends: the
      // coordinator's word, however long the run takes. Ask again.
      const absl::Time now = absl::Now();
      if (now - last_wait_log >= options_.retry_log_interval) {
        last_wait_log = now;
        STARLING_LOG(INFO) << what << ": waiting to be taken in; "
                           << status.error_message();
      }
      deadline = now + timeout;
      continue;
    }
    if (call.outcome != Outcome::kRetry) {
      return FromGrpcStatus(status, absl::StrCat(what, " at the coordinator ",
                                                 options_.coordinator));
    }
    if (first_cause.ok()) first_cause = status;
    const absl::Time now = absl::Now();
    if (now >= deadline ||
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      const bool same = status.error_code() == first_cause.error_code() &&
                        status.error_message() == first_cause.error_message();
      return absl::UnavailableError(absl::StrCat(
          "could not reach the coordinator at ", options_.coordinator,
          " within ", absl::FormatDuration(timeout), " (", what,
          "): ", Cause(first_cause),
          same ? "" : absl::StrCat("; last attempt: ", Cause(status))));
    }
    LogRetry(&last_log, what, status);
    if (!PauseUntil(std::min(deadline, now + pause))) return cancelled;
    pause = std::min(2 * pause, kMaxRetry);
  }
}

void CoordinatorLink::JoinAfresh() {
  const std::string what =
      absl::StrCat("joining job ", options_.job_id, " afresh");
  absl::Time last_log = absl::InfinitePast();
  while (true) {
    absl::StatusOr<proto::JoinResponse> joined =
        AskToJoin(options_.join_timeout, what);
    if (joined.ok()) {
      {
        absl::MutexLock lock(&mu_);
        join_afresh_needed_ = false;
        rejoin_needed_ = false;
      }
      Regroup(*joined, "joined afresh");
      return;
    }
    if (absl::IsCancelled(joined.status())) return;
    const absl::Time now = absl::Now();
    if (now - last_log >= options_.retry_log_interval) {
      last_log = now;
      STARLING_LOG(WARNING)
          << "this node is not a member of job " << options_.job_id
          << "'s group; " << joined.status().message() << "; asking again";
    }
    // The coordinator held the join until its deadline (a group still
    // forming, or a resumed one waiting for its members; a running group's
    // run is waited out in AskToJoin): ask again at once. Otherwise pause
    // before asking again.
    if (!absl::IsDeadlineExceeded(joined.status()) &&
        !PauseUntil(now + kMaxRetry)) {
      return;
    }
  }
}

void CoordinatorLink::KeepMemberKey(const proto::JoinResponse& response) {
  if (response.member_key().empty()) return;  // the one it has stays
  absl::MutexLock lock(&mu_);
  member_key_ = response.member_key();
}

void CoordinatorLink::Regroup(const proto::JoinResponse& group,
                              absl::string_view how) {
  proto::JoinResponse was;
  {
    absl::MutexLock lock(&mu_);
    // Another thread adopted it already.
    if (group.group_epoch() <= join_.group_epoch()) return;
    was = join_;
    join_ = group;
    last_run_ = proto::RunStatus();
    changed_.SignalAll();
  }
  STARLING_LOG(WARNING) << "the group of job " << options_.job_id
                        << " re-formed: this node is rank " << group.rank()
                        << " of " << group.group_size() << " in group epoch "
                        << group.group_epoch() << " (was rank " << was.rank()
                        << " of " << was.group_size() << " in group epoch "
                        << was.group_epoch() << "; " << how << ")";
  if (callbacks_.on_regroup) callbacks_.on_regroup(group);
}

// --- Runs -------------------------------------------------------------------

void CoordinatorLink::NoteRunId(uint64_t run_id) {
  absl::MutexLock lock(&mu_);
  highest_run_id_ = std::max(highest_run_id_, run_id);
}

absl::StatusOr<proto::BeginRunResponse> CoordinatorLink::BeginRun(
    const std::vector<proto::TensorSpec>& tensors,
    const std::string& local_error, std::optional<uint32_t> initial_crc32c,
    int local_workers, uint64_t next_op_seq, absl::Time deadline) {
  proto::BeginRunRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (!joined_) {
      return absl::FailedPreconditionError(
          "a run cannot begin before the node joined the job");
    }
    request.set_rank(join_.rank());
    request.set_group_epoch(join_.group_epoch());
  }
  request.set_job_id(options_.job_id);
  request.set_local_workers(local_workers);
  if (initial_crc32c.has_value()) {
    request.set_sets_initial_parameters(true);
    request.set_initial_parameters_crc32c(*initial_crc32c);
  }
  if (local_error.empty()) {
    for (const proto::TensorSpec& spec : tensors) *request.add_tensors() = spec;
  } else {
    request.set_error(local_error);
  }
  request.set_next_op_seq(next_op_seq);

  proto::BeginRunResponse response;
  STARLING_ASSIGN_OR_RETURN(
      const CallResult call,
      CallRetrying(
          "BeginRun", deadline,
          absl::StrCat("the begin-run request of rank ", request.rank()),
          "beginning a run", [&](grpc::ClientContext* context) {
            // The coordinator holds the call until every rank
            // asked, at most until our deadline.
            request.set_wait_timeout_ms(std::max<int64_t>(
                1, absl::ToInt64Milliseconds(deadline - absl::Now())));
            return stub_->BeginRun(context, request, &response);
          }));
  switch (call.outcome) {
    case Outcome::kOk:
      NoteRunId(response.run_id());
      return response;
    case Outcome::kStopping:
      return absl::CancelledError(absl::StrCat("begin-run request of rank ",
                                               request.rank(),
                                               ": the daemon is stopping"));
    default:
      // The coordinator's own word, self-contained (names the tensor and
      // the ranks, or the ranks that did not begin).
      return FromGrpcStatus(call.status);
  }
}

absl::StatusOr<CoordinatorLink::CallResult> CoordinatorLink::CallRetrying(
    absl::string_view method, absl::Time deadline, absl::string_view what,
    absl::string_view doing,
    const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  const absl::Time start = absl::Now();
  absl::Time last_log = absl::InfinitePast();
  absl::Duration pause = kFirstRetry;
  grpc::Status last;
  uint64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    epoch = join_.group_epoch();
  }
  while (true) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the coordinator at ", options_.coordinator, " did not answer ", what,
          " within ",
          absl::FormatDuration(absl::Trunc(now - start, absl::Milliseconds(1))),
          last.ok() ? std::string() : absl::StrCat(": ", Cause(last))));
    }
    if (std::optional<CallResult> moved = Regrouped(epoch, what)) {
      return *moved;
    }
    const CallResult call = Call(method, deadline, rpc);
    switch (call.outcome) {
      case Outcome::kOk:
      case Outcome::kFailed:
      case Outcome::kStopping:
        return call;
      case Outcome::kRejoin:
        if (Rejoin().ok()) continue;
        if (std::optional<CallResult> moved = Regrouped(epoch, what)) {
          return *moved;
        }
        break;
      case Outcome::kRetry:
        break;
    }
    if (last.ok() ||
        call.status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      last = call.status;
    }
    LogRetry(&last_log, doing, call.status);
    if (!PauseUntil(std::min(deadline, absl::Now() + pause))) {
      return CallResult{grpc::Status::CANCELLED, Outcome::kStopping};
    }
    pause = std::min(2 * pause, kMaxRetry);
  }
}

std::optional<CoordinatorLink::CallResult> CoordinatorLink::Regrouped(
    uint64_t epoch, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  if (join_afresh_needed_) {
    return CallResult{
        grpc::Status(
            grpc::StatusCode::UNAVAILABLE,
            absl::StrCat("this node was dropped from group epoch ", epoch,
                         " and joins afresh; ", what, " was of that group")),
        Outcome::kFailed};
  }
  if (join_.group_epoch() == epoch) return std::nullopt;
  return CallResult{
      grpc::Status(grpc::StatusCode::UNAVAILABLE,
                   absl::StrCat("the group re-formed (group epoch ", epoch,
                                " -> ", join_.group_epoch(), "); ", what,
                                " was of the old group")),
      Outcome::kFailed};
}

absl::StatusOr<proto::Schedule> CoordinatorLink::GetSchedule(
    uint64_t next_iteration, absl::Time deadline) {
  proto::GetScheduleRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (!joined_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no schedule can be asked of the coordinator at ",
          options_.coordinator, " before the node joined the job"));
    }
    request.set_rank(join_.rank());
    request.set_group_epoch(join_.group_epoch());
  }
  request.set_job_id(options_.job_id);
  request.set_next_iteration(next_iteration);
  const std::string what =
      absl::StrCat("the schedule request of rank ", request.rank(),
                   " from iteration ", next_iteration);

  proto::Schedule response;
  STARLING_ASSIGN_OR_RETURN(
      const CallResult call,
      CallRetrying("GetSchedule", deadline, what, "asking for a schedule",
                   [&](grpc::ClientContext* context) {
                     return stub_->GetSchedule(context, request, &response);
                   }));
  switch (call.outcome) {
    case Outcome::kOk:
      return response;
    case Outcome::kStopping:
      return absl::CancelledError(absl::StrCat(what, " to the coordinator at ",
                                               options_.coordinator,
                                               ": the daemon is stopping"));
    default:
      return FromGrpcStatus(
          call.status, absl::StrCat("the coordinator at ", options_.coordinator,
                                    " refused ", what));
  }
}

void CoordinatorLink::EndRun(const proto::RunStatus& run, int64_t failed_step,
                             uint64_t group_epoch) {
  Outgoing item;
  item.group_epoch = group_epoch;
  item.end.emplace();
  proto::EndRunRequest& request = *item.end;
  request.set_job_id(options_.job_id);
  request.set_run_id(run.run_id());
  request.set_state(run.state());
  request.set_steps(run.steps());
  request.set_failed_step(failed_step);
  request.set_error(run.error());
  request.set_suspended(run.suspended());
  NoteRunId(run.run_id());
  Enqueue(std::move(item));
}

void CoordinatorLink::ReportStepFailure(int64_t step,
                                        const std::string& error) {
  Outgoing item;
  item.step.emplace();
  item.step->set_job_id(options_.job_id);
  item.step->set_iteration(static_cast<uint64_t>(std::max<int64_t>(0, step)));
  item.step->set_error(error);
  Enqueue(std::move(item));
}

void CoordinatorLink::ReportVanishedPeer(const std::string& data_address) {
  absl::MutexLock lock(&mu_);
  if (!joined_) return;
  vanished_.insert(data_address);
  beat_now_ = true;
  changed_.SignalAll();
}

void CoordinatorLink::Enqueue(Outgoing item) {
  absl::MutexLock lock(&mu_);
  if (item.group_epoch == 0) item.group_epoch = join_.group_epoch();
  if (queue_.size() >= kMaxQueued) {
    STARLING_LOG(WARNING) << "dropping an unsent report to the coordinator "
                          << options_.coordinator << ": " << kMaxQueued
                          << " are waiting";
    queue_.pop_front();
  }
  queue_.push_back(std::move(item));
  retry_queue_at_ = absl::InfinitePast();
  changed_.SignalAll();
}

// --- The link's thread ------------------------------------------------------

void CoordinatorLink::HeartbeatLoop() {
  absl::Time next_beat = absl::Now();
  while (true) {
    std::deque<Outgoing> items;
    bool beat = false;
    bool rejoin = false;
    bool afresh = false;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_) {
        const absl::Time now = absl::Now();
        if (now >= next_beat || beat_now_) {
          beat = true;
          beat_now_ = false;
          break;
        }
        if (!queue_.empty() && now >= retry_queue_at_) break;
        absl::Time wake = next_beat;
        if (!queue_.empty()) wake = std::min(wake, retry_queue_at_);
        changed_.WaitWithDeadline(&mu_, wake);
      }
      if (stopping_) break;
      items.swap(queue_);
      rejoin = rejoin_needed_;
      afresh = join_afresh_needed_;
    }
    if (afresh) {
      // Not a member: nothing to report or beat for until taken in again.
      JoinAfresh();
      next_beat = absl::Now();
      continue;
    }
    if (rejoin) {
      // Its failure was logged; the next round tries again.
      Rejoin().IgnoreError();
    }
    if (!items.empty()) {
      std::deque<Outgoing> left = Send(std::move(items), absl::Time());
      if (!left.empty()) {
        absl::MutexLock lock(&mu_);
        // Keep the order: what was left before what came since.
        left.insert(left.end(), std::make_move_iterator(queue_.begin()),
                    std::make_move_iterator(queue_.end()));
        queue_.swap(left);
        retry_queue_at_ = absl::Now() + std::min(period_, absl::Seconds(1));
      }
    }
    if (beat) {
      next_beat = absl::Now() + period_;
      Beat();
    }
  }
  // One last try at what is queued (a run's end, a failed step), within
  // one rpc_timeout in all.
  std::deque<Outgoing> items;
  {
    absl::MutexLock lock(&mu_);
    items.swap(queue_);
  }
  if (!items.empty()) {
    const size_t unsent =
        Send(std::move(items), absl::Now() + rpc_timeout_).size();
    if (unsent > 0) {
      STARLING_LOG(WARNING)
          << unsent << " report(s) to the coordinator " << options_.coordinator
          << " not sent before stopping";
    }
  }
}

std::deque<CoordinatorLink::Outgoing> CoordinatorLink::Send(
    std::deque<Outgoing> items, absl::Time final_deadline) {
  const bool final = final_deadline != absl::Time();
  int rank;
  uint64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    rank = join_.rank();
    epoch = join_.group_epoch();
  }
  while (!items.empty()) {
    Outgoing& item = items.front();
    if (item.group_epoch != epoch) {
      // Of a group re-formed since: the coordinator failed its run then.
      items.pop_front();
      continue;
    }
    const absl::Time deadline =
        final ? final_deadline : absl::Now() + rpc_timeout_;
    std::string what;
    CallResult call;
    if (item.step.has_value()) {
      item.step->set_rank(rank);
      item.step->set_group_epoch(epoch);
      what = absl::StrCat("the report of failed step ", item.step->iteration());
      call = Call(
          "ReportStep", deadline,
          [&](grpc::ClientContext* context) {
            proto::StepReportAck ack;
            return stub_->ReportStep(context, *item.step, &ack);
          },
          /*cancellable=*/!final);
    } else {
      item.end->set_rank(rank);
      item.end->set_group_epoch(epoch);
      what = absl::StrCat("the end of run ", item.end->run_id());
      call = Call(
          "EndRun", deadline,
          [&](grpc::ClientContext* context) {
            proto::EndRunResponse ack;
            return stub_->EndRun(context, *item.end, &ack);
          },
          /*cancellable=*/!final);
    }
    switch (call.outcome) {
      case Outcome::kOk:
        items.pop_front();
        continue;
      case Outcome::kFailed:
        STARLING_LOG(WARNING)
            << "the coordinator at " << options_.coordinator << " refused "
            << what << ": " << Cause(call.status);
        items.pop_front();
        continue;
      case Outcome::kRejoin: {
        absl::MutexLock lock(&mu_);
        rejoin_needed_ = true;
        return items;
      }
      case Outcome::kStopping:
        return items;
      case Outcome::kRetry:
        LogRetry(&last_send_log_, absl::StrCat("sending ", what), call.status);
        return items;
    }
  }
  return items;
}

void CoordinatorLink::Beat() {
  proto::HeartbeatRequest request;
  if (callbacks_.fill_status) callbacks_.fill_status(&request);
  request.set_job_id(options_.job_id);
  std::set<std::string> vanished;
  {
    absl::MutexLock lock(&mu_);
    request.set_rank(join_.rank());
    request.set_group_epoch(join_.group_epoch());
    highest_run_id_ = std::max(highest_run_id_, request.run().run_id());
    last_run_ = request.run();
    vanished.swap(vanished_);
    // Named by their ranks in this epoch.
    for (int r = 0; r < join_.peers_size(); ++r) {
      if (r != join_.rank() && vanished.count(join_.peers(r).data_address())) {
        request.add_peers_vanished(r);
      }
    }
  }
  proto::HeartbeatResponse response;
  // At most one immediate retry, after a re-registration.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const CallResult call =
        Call("Heartbeat", absl::Now() + rpc_timeout_,
             [&](grpc::ClientContext* context) {
               return stub_->Heartbeat(context, request, &response);
             });
    if (call.outcome == Outcome::kOk) break;
    if (call.outcome == Outcome::kStopping) return;
    {
      absl::MutexLock lock(&mu_);
      beat_failing_ = true;
      // Told in the next heartbeat (of whatever epoch it is then).
      vanished_.insert(vanished.begin(), vanished.end());
    }
    if (call.outcome == Outcome::kRejoin && attempt == 0) {
      STARLING_LOG(WARNING)
          << "the coordinator at " << options_.coordinator
          << " does not know this node's group (did it restart?): "
          << call.status.error_message() << "; re-registering";
      if (!Rejoin().ok()) return;
      {
        absl::MutexLock lock(&mu_);
        // Re-formed: the next beat is of the new rank and epoch.
        if (join_.group_epoch() != request.group_epoch()) return;
      }
      continue;
    }
    LogRetry(&last_beat_log_, "heartbeat", call.status);
    return;
  }
  bool recovered;
  {
    absl::MutexLock lock(&mu_);
    ++heartbeats_;
    recovered = beat_failing_;
    beat_failing_ = false;
    last_beat_log_ = absl::InfinitePast();
    changed_.SignalAll();
  }
  if (recovered) {
    STARLING_LOG(INFO) << "heartbeats to the coordinator "
                       << options_.coordinator << " are accepted again";
  }
  if (!response.lost_ranks().empty() && callbacks_.on_lost_ranks) {
    callbacks_.on_lost_ranks(std::vector<int>(response.lost_ranks().begin(),
                                              response.lost_ranks().end()));
  }
  for (const proto::RunFailure& failure : response.failed_runs()) {
    if (!told_failures_.insert(failure.run_id()).second) continue;
    while (told_failures_.size() > kMaxToldFailures) {
      told_failures_.erase(told_failures_.begin());
    }
    STARLING_LOG(WARNING) << "the coordinator reports run " << failure.run_id()
                          << " failed: " << failure.error();
    if (callbacks_.on_run_failed) callbacks_.on_run_failed(failure);
  }
}

absl::Status CoordinatorLink::Rejoin() {
  // The run as the last heartbeat reported it: fill_status is called on the
  // link's thread only, and this may run on the step thread (BeginRun).
  proto::RejoinRequest request;
  *request.mutable_node() = identity_;
  {
    absl::MutexLock lock(&mu_);
    request.set_rank(join_.rank());
    request.set_group_epoch(join_.group_epoch());
    *request.mutable_peers() = join_.peers();
    *request.mutable_shard_map() = join_.shard_map();
    *request.mutable_run() = last_run_;
    request.set_highest_run_id(highest_run_id_);
  }
  proto::JoinResponse response;
  const CallResult call = Call(
      "Rejoin", absl::Now() + rpc_timeout_, [&](grpc::ClientContext* context) {
        return stub_->Rejoin(context, request, &response);
      });
  if (call.outcome != Outcome::kOk) {
    // Refused for good: the group re-formed without this node (or the
    // coordinator gave it up); it joins afresh.
    const bool afresh =
        call.outcome == Outcome::kFailed &&
        call.status.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      if (afresh) {
        first = !join_afresh_needed_;
        join_afresh_needed_ = true;
        rejoin_needed_ = false;
        changed_.SignalAll();
      } else {
        rejoin_needed_ = true;
      }
    }
    if (!afresh) {
      LogRetry(&last_rejoin_log_, "re-registering", call.status);
    } else if (first) {
      STARLING_LOG(WARNING)
          << "the coordinator " << options_.coordinator
          << " refused the re-registration of rank " << request.rank()
          << " of group epoch " << request.group_epoch() << ": "
          << call.status.error_message() << "; joining afresh";
    }
    return FromGrpcStatus(call.status, "re-registering");
  }
  KeepMemberKey(response);
  {
    absl::MutexLock lock(&mu_);
    rejoin_needed_ = false;
    ++rejoins_;
    last_rejoin_log_ = absl::InfinitePast();
  }
  if (response.group_epoch() > request.group_epoch()) {
    Regroup(response, "re-registered after the re-formation");
    return absl::OkStatus();
  }
  STARLING_LOG(INFO) << "re-registered with the coordinator "
                     << options_.coordinator << " as rank " << request.rank()
                     << " of group epoch " << request.group_epoch()
                     << (request.run().run_id() != 0
                             ? absl::StrCat(", in run ", request.run().run_id())
                             : std::string());
  if (response.rank() != request.rank() ||
      response.group_epoch() != request.group_epoch()) {
    STARLING_LOG(ERROR) << "the coordinator " << options_.coordinator
                        << " answered the re-registration with rank "
                        << response.rank() << " of group epoch "
                        << response.group_epoch() << "; this node keeps rank "
                        << request.rank() << " of group epoch "
                        << request.group_epoch();
  }
  return absl::OkStatus();
}

// --- Accessors --------------------------------------------------------------

proto::JoinResponse CoordinatorLink::join_response() const {
  absl::MutexLock lock(&mu_);
  return join_;
}

uint64_t CoordinatorLink::group_epoch() const {
  absl::MutexLock lock(&mu_);
  return join_.group_epoch();
}

int64_t CoordinatorLink::heartbeats() const {
  absl::MutexLock lock(&mu_);
  return heartbeats_;
}

int64_t CoordinatorLink::rejoins() const {
  absl::MutexLock lock(&mu_);
  return rejoins_;
}

bool CoordinatorLink::AwaitHeartbeats(int64_t count,
                                      absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  while (heartbeats_ < count && absl::Now() < deadline) {
    changed_.WaitWithDeadline(&mu_, deadline);
  }
  return heartbeats_ >= count;
}

}  // namespace node
}  // namespace starling
