#include "server/node/node_daemon.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/job_config_checks.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/version.h"
#include "server/transport/peer_address.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_options.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace node {
namespace {

// Schedules kept for the local workers that have not asked yet; a few
// more than the one in use, so that a worker running behind still hits.
constexpr size_t kKeptSchedules = 4;
// Bound on one schedule request when the job config gives no collective
// timeout.
constexpr absl::Duration kDefaultScheduleTimeout = absl::Seconds(30);

std::string LocalHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

NodeDaemon::NodeDaemon(NodeOptions options, NodeMetrics metrics,
                       std::shared_ptr<CollectiveMonitor> collectives,
                       metrics::MetricsRegistry* registry)
    : options_(std::move(options)),
      metrics_(metrics),
      collectives_(std::move(collectives)),
      registry_(registry) {}

NodeDaemon::~NodeDaemon() { Stop(); }

std::string NodeDaemon::Self() const {
  return absl::StrCat("rank ", join_.rank(), " (", options_.data_host, ":",
                      options_.data_port, ")");
}

absl::StatusOr<std::unique_ptr<NodeDaemon>> NodeDaemon::Start(
    const NodeOptions& options_in, metrics::MetricsRegistry* registry) {
  NodeOptions options = options_in;
  if (options.coordinator.empty() || options.job_id.empty() ||
      options.worker_socket.empty()) {
    return absl::InvalidArgumentError(
        "the coordinator address, job id and worker socket are required");
  }
  if (options.local_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local workers must be >= 1, not ", options.local_workers));
  }
  if (options.hostname.empty()) options.hostname = LocalHostname();
  if (!(options.link_gbits >= 0) || !std::isfinite(options.link_gbits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the link rate must be >= 0 Gbit/s, not ", options.link_gbits));
  }
  STARLING_ASSIGN_OR_RETURN(NodeMetrics metrics,
                            NodeMetrics::Register(registry));
  metrics.link_rate->Set(options.link_gbits * 1e9 / 8);
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<CollectiveMonitor> collectives,
                            CollectiveMonitor::Create(registry));
  std::unique_ptr<NodeDaemon> daemon(
      new NodeDaemon(options, metrics, std::move(collectives), registry));
  NodeDaemon* d = daemon.get();
  // The coordinator's address is checked before anything is bound.
  CoordinatorLinkOptions link;
  link.coordinator = options.coordinator;
  link.job_id = options.job_id;
  link.hostname = options.hostname;
  link.data_address = absl::StrCat(options.data_host, ":", options.data_port);
  if (options.admin_port > 0) {
    link.admin_address =
        absl::StrCat(options.data_host, ":", options.admin_port);
  }
  link.local_workers = options.local_workers;
  link.join_timeout = options.join_timeout;
  CoordinatorLinkCallbacks callbacks;
  callbacks.fill_status = [d](proto::HeartbeatRequest* request) {
    d->FillHeartbeat(request);
  };
  callbacks.on_lost_ranks = [d](const std::vector<int>& lost) {
    d->OnLostRanks(lost);
  };
  callbacks.on_run_failed = [d](const proto::RunFailure& failure) {
    d->OnRunFailed(failure);
  };
  STARLING_ASSIGN_OR_RETURN(
      daemon->link_,
      CoordinatorLink::Create(std::move(link), std::move(callbacks)));
  // Everything this daemon listens on is taken before it joins, so that a
  // clash fails here and the group never forms with a dead member.
  STARLING_RETURN_IF_ERROR(daemon->Listen());
  // Heartbeats start at the join (the link's thread): forming the mesh may
  // take a while, and the coordinator must not take this node for dead
  // meanwhile.
  STARLING_RETURN_IF_ERROR(daemon->Join());
  STARLING_RETURN_IF_ERROR(daemon->OpenDataPlane());
  daemon->worker_server_->Serve(daemon.get());
  return daemon;
}

absl::Status NodeDaemon::Listen() {
  STARLING_ASSIGN_OR_RETURN(worker_server_,
                            WorkerServer::Listen(options_.worker_socket));
  transport::PeerAddress self;
  self.host = options_.data_host;
  self.port = options_.data_port;
  absl::StatusOr<transport::tcp::ScopedFd> fd =
      transport::tcp::Listen(self, -1);
  if (!fd.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on the data port ", options_.data_host, ":",
        options_.data_port, " (--data_port): ", fd.status().message()));
  }
  data_listen_fd_ = *std::move(fd);
  return absl::OkStatus();
}

absl::Status NodeDaemon::Join() {
  STARLING_ASSIGN_OR_RETURN(join_, link_->Join());
  // The coordinator checks the same table at its start-up; a coordinator of
  // another build could still send what this daemon cannot run.
  absl::Status config = proto::CheckJobConfig(join_.config());
  if (!config.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator ", options_.coordinator, " sent a job config this ",
        "daemon cannot run: ", config.message()));
  }
  if (join_.config().staleness() < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator ", options_.coordinator, " sent a job config this ",
        "daemon cannot run: staleness ", join_.config().staleness(),
        " is negative"));
  }
  return absl::OkStatus();
}

absl::Status NodeDaemon::OpenDataPlane() {
  const proto::JobConfig& config = join_.config();
  const int rank = join_.rank();
  const int size = join_.group_size();
  transport::tcp::TcpOptions tcp;
  tcp.rank = rank;
  for (const proto::PeerInfo& peer : join_.peers()) {
    STARLING_ASSIGN_OR_RETURN(std::vector<transport::PeerAddress> parsed,
                              transport::ParsePeerList(peer.data_address(), 0));
    tcp.peers.push_back(parsed[0]);
  }
  tcp.connect_timeout = std::max(options_.join_timeout, absl::Seconds(5));
  tcp.listen_fd = data_listen_fd_.release();  // the transport owns it now
  tcp.cluster_secret = options_.cluster_secret;
  tcp.group_key = join_.group_key();
  tcp.group_epoch = join_.group_epoch();
  tcp.insecure = options_.insecure;
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<transport::tcp::TcpTransport> tcp_t,
                            transport::tcp::TcpTransport::Create(tcp));
  STARLING_ASSIGN_OR_RETURN(
      transport_, MeteredTransport::Create(std::move(tcp_t), registry_));
  collectives_->SetGroup(rank, size);
  metrics_.rank->Set(rank);
  collective::CommunicatorOptions comm_options;
  comm_options.observer = collectives_.get();
  // This daemon's communicator is the only one on its transport: writes
  // that arrive for an op that failed here, or for ops a new run skipped,
  // are dropped and counted instead of held.
  comm_options.retire_stale_regions = true;
  if (config.collective_timeout_ms() > 0) {
    comm_options.timeout = absl::Milliseconds(config.collective_timeout_ms());
  }
  STARLING_ASSIGN_OR_RETURN(
      comm_, collective::Communicator::Create(transport_.get(), comm_options));

  metrics_.group_size->Set(size);

  runs_ = MakeRuns(config, comm_options.timeout);
  absl::MutexLock lock(&mu_);
  serving_ = true;
  return absl::OkStatus();
}

std::unique_ptr<RunManager> NodeDaemon::MakeRuns(const proto::JobConfig& config,
                                                 absl::Duration timeout) {
  RunManagerOptions run_options;
  run_options.local_workers = options_.local_workers;
  run_options.timeout = timeout;
  run_options.grace = options_.worker_grace;
  run_options.optimizer = config.optimizer();
  run_options.learning_rate = static_cast<float>(config.learning_rate());
  run_options.self = Self();
  auto runs = std::make_unique<RunManager>(
      run_options, comm_.get(), transport_.get(), &metrics_, this,
      [this](int64_t step, const absl::Status& status) {
        OnStep(step, status);
      });
  // The one place the job's mode picks its engine (proto/job_config_checks:
  // which modes the shard owners run).
  if (proto::UsesShardOwners(config.mode())) {
    PsEngineOptions ps_options;
    ps_options.timeout = timeout;
    ps_options.self = Self();
    ps_options.hogwild = config.mode() == proto::JobConfig::MODE_HOGWILD_EASGD;
    ps_options.round_robin =
        config.mode() == proto::JobConfig::MODE_ROUND_ROBIN_EASGD;
    engine_ = std::make_unique<PsEngine>(ps_options, runs.get(),
                                         transport_.get(), &metrics_);
  } else {
    SyncEngineOptions sync_options;
    sync_options.timeout = timeout;
    sync_options.grace = options_.worker_grace;
    sync_options.staleness = config.mode() == proto::JobConfig::MODE_ASYNC_SGD
                                 ? config.staleness()
                                 : 0;
    sync_options.self = Self();
    engine_ = std::make_unique<SyncEngine>(sync_options, runs.get(),
                                           comm_.get(), &metrics_);
  }
  runs->Start(engine_.get());
  engine_->Start();
  return runs;
}

void NodeDaemon::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  // The link first: it cancels a begin-run request the step thread may be
  // waiting in and makes a last try at the queued reports. Then the runs
  // and their engine: that wakes pushes and pulls waiting in workers'
  // reader threads, which the worker server then joins.
  if (link_ != nullptr) link_->Stop();
  if (runs_ != nullptr) runs_->Stop();
  if (engine_ != nullptr) engine_->Stop();
  if (worker_server_ != nullptr) worker_server_->Stop();
  data_listen_fd_ = transport::tcp::ScopedFd();  // if the group never formed
}

absl::StatusOr<RunRendezvous::Begun> NodeDaemon::BeginRun(
    const std::vector<proto::TensorSpec>& tensors,
    const std::string& local_error, int local_workers, uint64_t next_op_seq,
    absl::Time deadline) {
  STARLING_ASSIGN_OR_RETURN(proto::BeginRunResponse response,
                            link_->BeginRun(tensors, local_error, local_workers,
                                            next_op_seq, deadline));
  Begun begun;
  begun.run_id = response.run_id();
  begun.first_op_seq = response.first_op_seq();
  begun.total_workers = response.total_workers();
  return begun;
}

void NodeDaemon::EndRun(const proto::RunStatus& run) {
  if (!run.error().empty()) {
    absl::MutexLock lock(&mu_);
    last_error_ = run.error();
  }
  link_->EndRun(run, run.state() == proto::RunStatus::STATE_FAILED
                         ? static_cast<int64_t>(run.steps())
                         : -1);
}

void NodeDaemon::OnStep(int64_t step, const absl::Status& status) {
  if (status.ok()) return;
  const std::string error(status.message());
  {
    absl::MutexLock lock(&mu_);
    last_error_ = error;
  }
  link_->ReportStepFailure(step, error);
}

void NodeDaemon::FillHeartbeat(proto::HeartbeatRequest* request) {
  {
    absl::MutexLock lock(&mu_);
    if (!serving_) return;
  }
  // Sync modes: steps applied; parameter-server mode: updates of the shard.
  const proto::RunStatus run = runs_->run_status();
  request->set_iteration(static_cast<uint64_t>(std::max<int64_t>(
      0, run.state() == proto::RunStatus::STATE_RUNNING ? run.steps() : 0)));
  std::shared_ptr<Run> current = runs_->current_run();
  if (current != nullptr) {
    request->set_shard_bytes(current->store->ShardBytes());
    request->set_optimizer_state_bytes(current->optimizer->StateBytes());
  }
  int missing = 0;
  for (const proto::WorkerStatus& w : runs_->workers()) {
    missing += w.state() == proto::WorkerStatus::STATE_MISSING ? 1 : 0;
    *request->add_workers() = w;
  }
  *request->mutable_run() = run;
  // The metrics that follow the heartbeat (same period, same truth).
  metrics_.missing_workers->Set(missing);
  metrics_.run_id->Set(run.state() == proto::RunStatus::STATE_RUNNING
                           ? static_cast<double>(run.run_id())
                           : 0);
  metrics_.registered_memory_bytes->Set(
      static_cast<double>(transport_->registered_bytes() +
                          pool_bytes_.load(std::memory_order_relaxed)));
  const uint64_t dropped = transport_->stale_writes_dropped();
  if (dropped > stale_writes_reported_) {
    metrics_.stale_writes_dropped->Increment(
        static_cast<double>(dropped - stale_writes_reported_));
    stale_writes_reported_ = dropped;
  }
}

void NodeDaemon::OnRunFailed(const proto::RunFailure& failure) {
  {
    absl::MutexLock lock(&mu_);
    if (!serving_) return;
  }
  runs_->AbortRun(
      failure.run_id(),
      absl::AbortedError(absl::StrCat("the coordinator reports run ",
                                      failure.run_id(), " failed on rank ",
                                      failure.rank(), ": ", failure.error())));
}

void NodeDaemon::OnLostRanks(const std::vector<int>& lost_ranks) {
  {
    absl::MutexLock lock(&mu_);
    if (!serving_) return;
  }
  for (int lost : lost_ranks) {
    if (lost == join_.rank() || lost < 0 || lost >= transport_->size()) {
      continue;
    }
    if (transport_->PeerStatus(lost).ok()) {
      transport_->AbortPeer(
          lost, absl::UnavailableError(absl::StrCat("the coordinator reports ",
                                                    transport_->PeerName(lost),
                                                    " LOST (no heartbeat)")));
    }
  }
}

absl::StatusOr<proto::HelloReply> NodeDaemon::Attach(
    const WorkerHandle& worker, const proto::HelloRequest& hello) {
  proto::HelloReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      return absl::UnavailableError(
          absl::StrCat("daemon ", Self(), " is shutting down"));
    }
  }
  STARLING_RETURN_IF_ERROR(runs_->Attach(worker, &reply));
  metrics_.attached_workers->Set(runs_->attached_workers());
  if (worker.pool != nullptr) {
    pool_bytes_.fetch_add(worker.pool->size_bytes(), std::memory_order_relaxed);
  }
  reply.set_rank(join_.rank());
  reply.set_group_size(join_.group_size());
  reply.set_local_workers(options_.local_workers);
  reply.set_daemon_address(
      absl::StrCat(options_.data_host, ":", options_.data_port));
  reply.set_parameter_count(join_.config().parameter_count());
  reply.set_mode(join_.config().mode());
  reply.set_staleness(join_.config().mode() == proto::JobConfig::MODE_ASYNC_SGD
                          ? join_.config().staleness()
                          : 0);
  *reply.mutable_job() = join_.config();
  reply.mutable_job()->clear_tensors();
  STARLING_LOG(INFO) << "worker '" << hello.worker_name() << "' (index "
                     << worker.index << ", pid " << worker.pid << ") attached"
                     << (reply.run_id() != 0
                             ? absl::StrCat(", resuming run ", reply.run_id(),
                                            " at step ", reply.next_step())
                             : std::string());
  return reply;
}

void NodeDaemon::Detach(const WorkerHandle& worker) {
  STARLING_LOG(INFO) << "worker '" << worker.name << "' (index " << worker.index
                     << ") detached";
  runs_->Detach(worker);
  metrics_.attached_workers->Set(runs_->attached_workers());
  if (worker.pool != nullptr) {
    pool_bytes_.fetch_sub(worker.pool->size_bytes(), std::memory_order_relaxed);
  }
  // A worker that left a running run unfinished holds its slot as missing.
  for (const proto::WorkerStatus& w : runs_->workers()) {
    if (w.index() == worker.index &&
        w.state() == proto::WorkerStatus::STATE_MISSING) {
      metrics_.worker_failures->Increment();
      STARLING_LOG(WARNING)
          << "worker '" << worker.name << "' (index " << worker.index
          << ") left the running run without finishing";
    }
  }
}

proto::CollectivesReply NodeDaemon::Collectives() const {
  const absl::Time now = absl::Now();
  proto::CollectivesReply reply = collectives_->Snapshot(now);
  *reply.mutable_local() = runs_->LocalRounds(now);
  return reply;
}

void NodeDaemon::Handle(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kDeclareTensor:
      runs_->Declare(worker, request);
      return;
    case proto::WorkerRequest::kCommitTensors:
    case proto::WorkerRequest::kAllReduce:
    case proto::WorkerRequest::kBarrier:
    case proto::WorkerRequest::kFinish:
      runs_->Submit(worker, request);
      return;
    case proto::WorkerRequest::kPushGradients:
      engine_->Push(worker, request);
      return;
    case proto::WorkerRequest::kPullParameters:
      engine_->Pull(worker, request);
      return;
    case proto::WorkerRequest::kSchedule:
      AnswerSchedule(worker, request);
      return;
    default:
      worker.responder->Reply(
          request.id(),
          absl::InvalidArgumentError("unknown or repeated worker request"));
  }
}

void NodeDaemon::AnswerSchedule(const WorkerHandle& worker,
                                const proto::WorkerRequest& request) {
  const int64_t next = request.schedule().next_iteration();
  if (next < 0) {
    worker.responder->Reply(request.id(),
                            absl::InvalidArgumentError(absl::StrCat(
                                "schedule request from iteration ", next,
                                " of worker '", worker.name, "': negative")));
    return;
  }
  absl::StatusOr<proto::Schedule> schedule =
      ScheduleFrom(static_cast<uint64_t>(next));
  const absl::Status status = schedule.status();
  proto::WorkerResponse response;
  if (status.ok()) *response.mutable_schedule() = *std::move(schedule);
  worker.responder->Reply(request.id(), status, std::move(response));
}

absl::StatusOr<proto::Schedule> NodeDaemon::ScheduleFrom(
    uint64_t next_iteration) {
  const int64_t timeout_ms = join_.config().collective_timeout_ms();
  const absl::Time deadline =
      absl::Now() + (timeout_ms > 0 ? absl::Milliseconds(timeout_ms)
                                    : kDefaultScheduleTimeout);
  std::shared_ptr<CachedSchedule> entry;
  {
    absl::MutexLock lock(&schedules_mu_);
    for (const auto& [iteration, cached] : schedules_) {
      if (iteration == next_iteration) entry = cached;
    }
    if (entry != nullptr) {
      // Asked already: the answer, or wait for the RPC in flight (which
      // ends by its own deadline, about this one).
      if (!schedules_mu_.AwaitWithDeadline(absl::Condition(&entry->done),
                                           deadline)) {
        return absl::DeadlineExceededError(
            absl::StrCat("the schedule from iteration ", next_iteration,
                         " was not answered in time by the coordinator ",
                         options_.coordinator));
      }
      return entry->result;
    }
    entry = std::make_shared<CachedSchedule>();
    schedules_.emplace_back(next_iteration, entry);
    while (schedules_.size() > kKeptSchedules) schedules_.pop_front();
  }
  // No lock held across the RPC; other askers of this iteration wait on
  // `entry`, of other iterations ask for their own.
  absl::StatusOr<proto::Schedule> result =
      link_->GetSchedule(next_iteration, deadline);
  absl::MutexLock lock(&schedules_mu_);
  entry->result = result;
  entry->done = true;
  if (!result.ok()) {
    // Errors are for the askers waiting now; the next asker tries again.
    for (auto it = schedules_.begin(); it != schedules_.end(); ++it) {
      if (it->second == entry) {
        schedules_.erase(it);
        break;
      }
    }
  }
  return result;
}

proto::NodeStatusReply NodeDaemon::Status() const {
  proto::NodeStatusReply reply;
  reply.set_rank(join_.rank());
  reply.set_version(kStarlingVersion);
  reply.set_transport("tcp");
  reply.set_local_workers(options_.local_workers);
  {
    absl::MutexLock lock(&mu_);
    reply.set_last_error(last_error_);
    if (!serving_) return reply;
  }
  const proto::RunStatus run = runs_->run_status();
  *reply.mutable_run() = run;
  if (run.state() == proto::RunStatus::STATE_RUNNING) {
    reply.set_iteration(
        static_cast<uint64_t>(std::max<int64_t>(0, run.steps())));
  }
  std::shared_ptr<Run> current = runs_->current_run();
  if (current != nullptr) {
    reply.set_shard_bytes(current->store->ShardBytes());
    reply.set_optimizer_state_bytes(current->optimizer->StateBytes());
  }
  int attached = 0;
  for (const proto::WorkerStatus& w : runs_->workers()) {
    attached += w.state() == proto::WorkerStatus::STATE_ATTACHED ? 1 : 0;
    *reply.add_workers() = w;
  }
  reply.set_attached_workers(attached);
  for (const proto::RunStatus& r : runs_->recent_runs()) {
    *reply.add_recent_runs() = r;
  }
  return reply;
}

proto::ListShardsReply NodeDaemon::Shards() const {
  proto::ListShardsReply reply;
  std::shared_ptr<Run> run;
  {
    absl::MutexLock lock(&mu_);
    if (serving_) run = runs_->current_run();
  }
  if (run == nullptr) return reply;  // no run: no shard
  // This rank's parts: one per bucket of the synchronous step, one flat
  // shard for the shard owners.
  const std::vector<std::pair<uint64_t, uint64_t>> owned =
      engine_->OwnedRanges(*run);
  for (const auto& [begin, end] : owned) {
    for (const TensorLayout::Entry& entry : run->layout.tensors) {
      const uint64_t b = std::max<uint64_t>(begin, entry.offset);
      const uint64_t e = std::min<uint64_t>(end, entry.offset + entry.elements);
      if (b >= e) continue;
      proto::ShardInfo* info = reply.add_shards();
      info->set_tensor(entry.spec.name());
      info->mutable_range()->set_rank(join_.rank());
      info->mutable_range()->set_begin_element(b);
      info->mutable_range()->set_end_element(e);
      info->set_dtype(entry.spec.dtype());
      // Held as float32 (the master) whatever the tensor's type.
      info->set_bytes((e - b) * sizeof(float));
    }
  }
  return reply;
}

proto::GroupReply NodeDaemon::Group() const {
  proto::GroupReply reply;
  reply.set_group_epoch(join_.group_epoch());
  for (int r = 0; r < join_.peers_size(); ++r) {
    proto::PeerInfo* peer = reply.add_peers();
    *peer = join_.peers(r);
    if (r != join_.rank() && transport_ != nullptr &&
        !transport_->PeerStatus(r).ok()) {
      peer->set_health(proto::NODE_HEALTH_LOST);
    }
  }
  return reply;
}

}  // namespace node
}  // namespace starling
