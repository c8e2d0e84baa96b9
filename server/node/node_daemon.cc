#include "server/node/node_daemon.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/job_config_checks.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/version.h"
#include "server/node/sync/buddy.h"
#include "server/node/transport_choice.h"
#include "server/transport/fabric/fabric_connect.h"
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
// Longest a worker's Hello waits for the data plane of a re-formed group.
constexpr absl::Duration kAttachWait = absl::Seconds(20);

std::string LocalHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

NodeDaemon::NodeDaemon(NodeOptions options, NodeMetrics metrics,
                       std::shared_ptr<CollectiveMonitor> collectives)
    : options_(std::move(options)),
      metrics_(metrics),
      collectives_(std::move(collectives)),
      checkpoints_(std::make_unique<CheckpointWriter>(&metrics_)) {}

NodeDaemon::~NodeDaemon() { Stop(); }

std::string NodeDaemon::SelfAt(int rank) const {
  return absl::StrCat("rank ", rank, " (", options_.data_host, ":",
                      options_.data_port, ")");
}

std::string NodeDaemon::Self() const { return SelfAt(rank()); }

proto::JoinResponse NodeDaemon::group() const {
  absl::MutexLock lock(&mu_);
  return group_;
}

std::shared_ptr<NodeDaemon::Plane> NodeDaemon::plane() const {
  absl::MutexLock lock(&mu_);
  return plane_;
}

absl::Status NodeDaemon::NoPlane() const {
  absl::MutexLock lock(&mu_);
  if (stopped_) {
    return absl::UnavailableError(
        absl::StrCat("daemon ", SelfAt(group_.rank()), " is shutting down"));
  }
  return absl::UnavailableError(absl::StrCat(
      "daemon ", SelfAt(group_.rank()),
      " is forming the data plane of group epoch ", group_.group_epoch(),
      " (the group re-formed); try again in a moment"));
}

void NodeDaemon::Refuse(const WorkerHandle& worker,
                        const proto::WorkerRequest& request,
                        const absl::Status& why) {
  worker.responder->Reply(request.id(), why);
}

void StartCanceller::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  // Under the lock: Start cannot return (and free the daemon) meanwhile.
  if (daemon_ != nullptr) daemon_->Stop();
}

bool StartCanceller::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool StartCanceller::Attach(NodeDaemon* daemon) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  daemon_ = daemon;
  return true;
}

void StartCanceller::Detach() {
  absl::MutexLock lock(&mu_);
  daemon_ = nullptr;
}

absl::StatusOr<std::unique_ptr<NodeDaemon>> NodeDaemon::Start(
    const NodeOptions& options, metrics::MetricsRegistry* registry,
    StartCanceller* canceller) {
  absl::StatusOr<std::unique_ptr<NodeDaemon>> daemon =
      StartUncancelled(options, registry, canceller);
  // StartUncancelled detached the canceller: a Cancel() from here on
  // does nothing, so one that came before is the last word.
  if (canceller != nullptr && canceller->cancelled()) {
    if (daemon.ok()) (*daemon)->Stop();
    return absl::CancelledError(
        absl::StrCat("stopped while joining job ", options.job_id,
                     " at the coordinator ", options.coordinator));
  }
  return daemon;
}

absl::StatusOr<std::unique_ptr<NodeDaemon>> NodeDaemon::StartUncancelled(
    const NodeOptions& options_in, metrics::MetricsRegistry* registry,
    StartCanceller* canceller) {
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
      new NodeDaemon(options, metrics, std::move(collectives)));
  NodeDaemon* d = daemon.get();
  if (canceller != nullptr && !canceller->Attach(d)) {
    return absl::CancelledError("stopped before joining");
  }
  // Declared after `daemon`, so destroyed before it: a Cancel() in progress
  // finishes before a failed start frees the daemon.
  struct Detacher {
    StartCanceller* canceller;
    ~Detacher() {
      if (canceller != nullptr) canceller->Detach();
    }
  } detach{canceller};
  // The coordinator's address is checked before anything is bound.
  CoordinatorLinkOptions link;
  link.coordinator = options.coordinator;
  link.job_id = options.job_id;
  link.hostname = options.hostname;
  link.data_address = absl::StrCat(options.data_host, ":", options.data_port);
  if (options.admin_port > 0) {
    link.admin_address = absl::StrCat(
        options.admin_host.empty() ? options.data_host : options.admin_host,
        ":", options.admin_port);
  }
  link.local_workers = options.local_workers;
  link.join_timeout = options.join_timeout;
  link.cluster_secret = options.cluster_secret;
  link.tls = options.tls;
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
  callbacks.on_regroup = [d](const proto::JoinResponse& group) {
    d->OnRegroup(group);
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
  STARLING_ASSIGN_OR_RETURN(daemon->traffic_,
                            MeteredTransport::Register(registry));
  STARLING_ASSIGN_OR_RETURN(
      std::shared_ptr<Plane> plane,
      daemon->OpenDataPlane(daemon->group(),
                            std::max(options.join_timeout, absl::Seconds(5))));
  if (const uint64_t run_id = plane->group.carried_run_id(); run_id != 0) {
    // Taken into a running run (a restart, or a node added): its state
    // comes from the daemons that carry it, before any worker attaches.
    // Its errors are logged and reported there; the daemon serves on.
    CarriedRun joins;
    joins.run_id = run_id;
    joins.local_workers = options.local_workers;
    STARLING_LOG(INFO) << "run " << run_id << " goes on in group epoch "
                       << plane->group.group_epoch()
                       << " with this daemon: receiving its state";
    plane->runs->ContinueRun(joins, nullptr).IgnoreError();
  }
  daemon->metrics_.peer_transports->Set(plane->peer_transports);
  {
    absl::MutexLock lock(&daemon->mu_);
    daemon->NoteServedLocked(plane->group);
    daemon->plane_ = std::move(plane);
  }
  daemon->regroup_thread_ = std::thread([d] { d->RegroupLoop(); });
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
  STARLING_ASSIGN_OR_RETURN(proto::JoinResponse joined, link_->Join());
  config_ = joined.config();
  {
    absl::MutexLock lock(&mu_);
    // A re-formation told before this (OnRegroup) is of a later epoch.
    if (joined.group_epoch() > group_.group_epoch()) group_ = joined;
  }
  // The coordinator checks the same table at its start-up; a coordinator of
  // another build could still send what this daemon cannot run.
  absl::Status config = proto::CheckJobConfig(config_);
  if (!config.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator ", options_.coordinator, " sent a job config this ",
        "daemon cannot run: ", config.message()));
  }
  if (config_.staleness() < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator ", options_.coordinator, " sent a job config this ",
        "daemon cannot run: staleness ", config_.staleness(), " is negative"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> NodeDaemon::ChooseTransports(
    transport::tcp::TcpTransport* tcp, absl::Time deadline) {
  STARLING_ASSIGN_OR_RETURN(transport::fabric::FabricRoutes routes,
                            transport::fabric::ConnectFabric(
                                tcp, ConnectOptionsFor(options_), deadline));
  std::vector<std::string> names(tcp->size());
  // Once per group: which transport each peer got, and why.
  std::vector<std::string> lines;
  for (const transport::fabric::FabricRoute& route : routes.peers) {
    names[route.peer] = route.transport;
    lines.push_back(absl::StrCat(tcp->PeerName(route.peer), ": ", route.why));
  }
  if (!lines.empty()) {
    STARLING_LOG(INFO) << tcp->PeerName(tcp->rank()) << " writes to "
                       << absl::StrJoin(lines, "; ");
  }
  return names;
}

absl::StatusOr<std::shared_ptr<NodeDaemon::Plane>> NodeDaemon::OpenDataPlane(
    const proto::JoinResponse& group, absl::Duration connect_timeout) {
  const proto::JobConfig& config = config_;
  const int rank = group.rank();
  const int size = group.group_size();
  auto plane = std::make_shared<Plane>(this);
  plane->group = group;
  plane->self = SelfAt(rank);
  transport::tcp::TcpOptions tcp;
  tcp.rank = rank;
  for (const proto::PeerInfo& peer : group.peers()) {
    STARLING_ASSIGN_OR_RETURN(std::vector<transport::PeerAddress> parsed,
                              transport::ParsePeerList(peer.data_address(), 0));
    tcp.peers.push_back(parsed[0]);
  }
  tcp.connect_timeout = connect_timeout;
  tcp.wait_spin = options_.wait_spin;
  tcp.loop_spin = options_.loop_spin;
  tcp.socket_send_buffer_bytes = options_.tcp_send_buffer_bytes;
  // The transport owns a duplicate: the port stays bound between planes.
  const int listen_fd = ::fcntl(data_listen_fd_.get(), F_DUPFD_CLOEXEC, 0);
  if (listen_fd < 0) {
    return absl::InternalError(absl::StrCat(
        "cannot duplicate the data port's socket: ", std::strerror(errno)));
  }
  tcp.listen_fd = listen_fd;
  tcp.cluster_secret = options_.cluster_secret;
  tcp.group_key = group.group_key();
  tcp.group_epoch = group.group_epoch();
  tcp.insecure = options_.insecure;
  // A later group (a member lost while this one formed) or a stop ends
  // the wait for this group's connections at once.
  tcp.give_up = [this, epoch = group.group_epoch()] {
    return ReasonToStopForming(epoch);
  };
  // A peer gone from under the data plane is told to the coordinator at
  // once: it drops the peer as soon as its heartbeat is late too. By its
  // address: the group may re-form before the report is sent.
  std::vector<std::string> addresses;
  for (const proto::PeerInfo& peer : group.peers()) {
    addresses.push_back(peer.data_address());
  }
  tcp.on_peer_vanished = [this, addresses](int peer, const absl::Status&) {
    if (peer >= 0 && peer < static_cast<int>(addresses.size())) {
      link_->ReportVanishedPeer(addresses[peer]);
    }
  };
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<transport::tcp::TcpTransport> tcp_t,
                            transport::tcp::TcpTransport::Create(tcp));
  STARLING_ASSIGN_OR_RETURN(
      plane->peer_transports,
      ChooseTransports(tcp_t.get(), absl::Now() + connect_timeout));
  plane->transport = MeteredTransport::Create(std::move(tcp_t), traffic_);
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
      plane->comm,
      collective::Communicator::Create(plane->transport.get(), comm_options));
  metrics_.group_size->Set(size);
  metrics_.group_epoch->Set(static_cast<double>(group.group_epoch()));

  const absl::Duration timeout = comm_options.timeout;
  RunManagerOptions run_options;
  run_options.local_workers = options_.local_workers;
  run_options.timeout = timeout;
  run_options.grace = options_.worker_grace;
  run_options.optimizer = config.optimizer();
  run_options.learning_rate = static_cast<float>(config.learning_rate());
  run_options.self = plane->self;
  // A buddy replica of each shard (the job's setting), on another host
  // where the group has one.
  if (config.replicas() > 0) {
    std::vector<std::string> hosts;
    for (const proto::PeerInfo& peer : group.peers()) {
      hosts.push_back(peer.hostname());
    }
    run_options.buddy_distance = BuddyDistance(hosts);
  }
  plane->runs = std::make_unique<RunManager>(
      run_options, plane->comm.get(), plane->transport.get(), &metrics_,
      plane.get(), [this](int64_t step, const absl::Status& status) {
        OnStep(step, status);
      });
  plane->runs->SetSuspendedHandler(
      [this, epoch = group.group_epoch(), rank, size](std::shared_ptr<Run> run,
                                                      const absl::Status&) {
        OnRunSuspended(std::move(run), epoch, rank, size);
      });
  // The one place the job's mode picks its engine (proto/job_config_checks:
  // which modes the shard owners run).
  if (proto::UsesShardOwners(config.mode())) {
    PsEngineOptions ps_options;
    ps_options.timeout = timeout;
    ps_options.self = plane->self;
    ps_options.hogwild = config.mode() == proto::JobConfig::MODE_HOGWILD_EASGD;
    ps_options.round_robin =
        config.mode() == proto::JobConfig::MODE_ROUND_ROBIN_EASGD;
    ps_options.buddy_distance = run_options.buddy_distance;
    plane->engine = std::make_unique<PsEngine>(ps_options, plane->runs.get(),
                                               plane->transport.get(),
                                               plane->comm.get(), &metrics_);
  } else {
    SyncEngineOptions sync_options;
    sync_options.timeout = timeout;
    sync_options.grace = options_.worker_grace;
    sync_options.staleness = config.mode() == proto::JobConfig::MODE_ASYNC_SGD
                                 ? config.staleness()
                                 : 0;
    sync_options.self = plane->self;
    sync_options.optimizer = config.optimizer();
    if (proto::WritesCheckpoints(config)) {
      sync_options.checkpoints = checkpoints_.get();
      sync_options.checkpoint_root = config.checkpoint_dir();
      sync_options.checkpoint_every_steps = config.checkpoint_every_steps();
      sync_options.checkpoint_interval =
          absl::Milliseconds(config.checkpoint_interval_ms());
      sync_options.group_epoch = group.group_epoch();
    }
    plane->engine = std::make_unique<SyncEngine>(
        sync_options, plane->runs.get(), plane->comm.get(), &metrics_);
  }
  plane->runs->Start(plane->engine.get());
  plane->engine->Start();
  return plane;
}

NodeDaemon::Plane::~Plane() {
  Stop(absl::OkStatus());
  // The manager and the engine call each other: both stopped above.
  runs.reset();
  engine.reset();
  comm.reset();
  transport.reset();
}

void NodeDaemon::Plane::Stop(const absl::Status& why) {
  {
    absl::MutexLock lock(&stop_mu);
    if (stopped) return;
    stopped = true;
  }
  // The runs first: that fails the run and wakes pushes and pulls waiting
  // in workers' reader threads; then the engine.
  if (runs != nullptr) runs->Stop(why);
  if (engine != nullptr) engine->Stop();
}

absl::StatusOr<RunRendezvous::Begun> NodeDaemon::Plane::BeginRun(
    const std::vector<proto::TensorSpec>& tensors,
    const std::string& local_error, std::optional<uint32_t> initial_crc32c,
    int local_workers, uint64_t next_op_seq, absl::Time deadline) {
  if (const uint64_t now = daemon->link_->group_epoch();
      now != group.group_epoch()) {
    return absl::UnavailableError(
        absl::StrCat("the group re-formed (group epoch ", group.group_epoch(),
                     " -> ", now, "); the run begins in the new group"));
  }
  STARLING_ASSIGN_OR_RETURN(
      proto::BeginRunResponse response,
      daemon->link_->BeginRun(tensors, local_error, initial_crc32c,
                              local_workers, next_op_seq, deadline));
  Begun begun;
  begun.run_id = response.run_id();
  begun.first_op_seq = response.first_op_seq();
  begun.total_workers = response.total_workers();
  begun.resume_run_id = response.resume_run_id();
  return begun;
}

void NodeDaemon::Plane::EndRun(const proto::RunStatus& run) {
  if (!run.error().empty()) {
    absl::MutexLock lock(&daemon->mu_);
    daemon->last_error_ = run.error();
  }
  daemon->link_->EndRun(run,
                        run.state() == proto::RunStatus::STATE_FAILED
                            ? static_cast<int64_t>(run.steps())
                            : -1,
                        group.group_epoch());
}

void NodeDaemon::Stop() {
  std::shared_ptr<Plane> plane;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    plane = plane_;
  }
  // The link first: it cancels a begin-run request the step thread may be
  // waiting in and makes a last try at the queued reports. Then the plane
  // (its runs and engine): that wakes pushes and pulls waiting in workers'
  // reader threads, which the worker server then joins.
  if (link_ != nullptr) link_->Stop();
  if (regroup_thread_.joinable()) regroup_thread_.join();
  if (plane != nullptr) plane->Stop(absl::OkStatus());
  if (worker_server_ != nullptr) worker_server_->Stop();
  {
    absl::MutexLock lock(&mu_);
    plane = std::move(plane_);
  }
  plane.reset();
  data_listen_fd_ = transport::tcp::ScopedFd();
}

// --- Re-formation
// -------------------------------------------------------------

void NodeDaemon::OnRegroup(const proto::JoinResponse& group) {
  std::shared_ptr<Plane> superseded;
  {
    absl::MutexLock lock(&mu_);
    if (next_group_.has_value() &&
        next_group_->group_epoch() >= group.group_epoch()) {
      return;
    }
    next_group_ = group;
    superseded = forming_;
  }
  if (superseded == nullptr) return;
  if (const std::optional<std::string> reason =
          ReasonToStopForming(superseded->group.group_epoch())) {
    AbortStateMove(*superseded, *reason);
  }
}

void NodeDaemon::AbortStateMove(Plane& plane, const std::string& reason) {
  // Its collectives fail at once on every peer (they see this one go): the
  // run stays suspended and goes on in the later group from the same
  // state, as when a member is lost while the state moves.
  const absl::Status why = absl::CancelledError(
      absl::StrCat(reason, " while the run's state moved"));
  for (int r = 0; r < plane.group.peers_size(); ++r) {
    if (r != plane.group.rank()) plane.transport->AbortPeer(r, why);
  }
}

void NodeDaemon::RegroupLoop() {
  while (true) {
    proto::JoinResponse group;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](NodeDaemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) {
            return d->stopped_ || d->next_group_.has_value();
          },
          this));
      if (stopped_) return;
      group = *std::move(next_group_);
      next_group_.reset();
    }
    absl::Status status = Regroup(group);
    if (absl::IsCancelled(status)) {
      // A later group replaced it (or the daemon stops): on to that one.
      STARLING_LOG(WARNING)
          << "the data plane of group epoch " << group.group_epoch()
          << " did not form: " << status.message();
      continue;
    }
    if (!status.ok()) {
      STARLING_LOG(ERROR) << "cannot form the data plane of group epoch "
                          << group.group_epoch() << " as rank " << group.rank()
                          << ": " << status.message()
                          << "; trying again unless the group re-forms";
      absl::MutexLock lock(&mu_);
      last_error_ = std::string(status.message());
      // Again in a second, unless a later group or a stop comes first.
      mu_.AwaitWithDeadline(
          absl::Condition(
              +[](NodeDaemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) {
                return d->stopped_ || d->next_group_.has_value();
              },
              this),
          absl::Now() + absl::Seconds(1));
      if (!next_group_.has_value()) next_group_ = group;
    }
  }
}

absl::Status NodeDaemon::Regroup(const proto::JoinResponse& group) {
  std::shared_ptr<Plane> old;
  uint64_t old_epoch;
  int old_rank;
  // The last plane that served (an earlier group than old_epoch's where
  // that one's plane never formed).
  uint64_t served_epoch;
  int served_rank;
  int served_size;
  {
    absl::MutexLock lock(&mu_);
    if (group.group_epoch() <= group_.group_epoch() && plane_ != nullptr) {
      return absl::OkStatus();  // this epoch's plane stands already
    }
    old = std::move(plane_);
    old_epoch = group_.group_epoch();
    old_rank = group_.rank();
    served_epoch = served_epoch_;
    served_rank = served_rank_;
    served_size = served_size_;
    group_ = group;
  }
  const absl::Status why = absl::UnavailableError(absl::StrCat(
      "the group re-formed (group epoch ", old_epoch, " -> ",
      group.group_epoch(),
      group.reformed_because().empty()
          ? std::string()
          : absl::StrCat(": ", group.reformed_because()),
      "): daemon ", SelfAt(old_rank), " is now rank ", group.rank(), " of ",
      group.group_size(),
      group.carried_run_id() != 0
          ? std::string()
          : "; this run ended with its group, the next one begins in the "
            "new"));
  const absl::Time start = absl::Now();
  if (old != nullptr) {
    // Peers that left the group are not waited for (their goodbye, a
    // collective): their connections are failed first.
    for (int r = 0; r < old->group.peers_size(); ++r) {
      if (r == old->group.rank()) continue;
      const std::string& address = old->group.peers(r).data_address();
      const bool stays = std::any_of(group.peers().begin(), group.peers().end(),
                                     [&address](const proto::PeerInfo& peer) {
                                       return peer.data_address() == address;
                                     });
      if (!stays) old->transport->AbortPeer(r, why);
    }
    // The old group's run ends here with `why`; its plane stops (its
    // transport is closed once its last user let go).
    old->Stop(why);
    old.reset();
    // No peer is written to until the new plane serves.
    metrics_.peer_transports->Set({});
  }
  // Every member learns of the group within a heartbeat period or so; one
  // that does not connect within twice the heartbeat timeout is dead too,
  // and the coordinator re-forms again.
  const absl::Duration connect_timeout = std::max(
      absl::Seconds(5), 2 * absl::Milliseconds(config_.heartbeat_timeout_ms()));
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<Plane> plane,
                            OpenDataPlane(group, connect_timeout));
  // The run that goes on in the new group: this daemon's state of it (the
  // old plane handed it over as it stopped), agreed with the others before
  // any worker attaches to the new plane.
  std::optional<Carry> carry;
  {
    absl::MutexLock lock(&mu_);
    carry = std::move(carry_);
    carry_.reset();
  }
  // Whether the carried run still waits for a later group, its state that
  // of the last plane that served (not this one's).
  bool still_suspended = false;
  if (group.carried_run_id() != 0) {
    // The state handed over by the last plane that served; where a later
    // group's plane never formed (a member lost while forming it), the
    // run still goes on from that state in the group after.
    CarriedRun carried;
    if (carry.has_value() && carry->carried.run_id == group.carried_run_id() &&
        carry->epoch == served_epoch) {
      carried = std::move(carry->carried);
    } else {
      carried.run_id = group.carried_run_id();
      carried.old_rank = served_rank;
      carried.old_size = served_size;
    }
    carried.local_workers = options_.local_workers;
    {
      absl::MutexLock lock(&mu_);
      forming_ = plane;
    }
    // A later group that came already (OnRegroup aborts for those after).
    if (const std::optional<std::string> reason =
            ReasonToStopForming(group.group_epoch())) {
      AbortStateMove(*plane, *reason);
    }
    // Its errors are logged and reported there: the run fails on every
    // daemon alike (the plan is the same everywhere), or, where a member
    // was lost meanwhile (or a later group came), waits for the group after
    // with the same state.
    plane->runs->ContinueRun(carried, &still_suspended).IgnoreError();
    {
      absl::MutexLock lock(&mu_);
      forming_.reset();
    }
    if (still_suspended) {
      OnRunSuspended(carried.run, served_epoch, carried.old_rank,
                     carried.old_size);
    }
  }
  size_t stale_workers = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_ || group_.group_epoch() != group.group_epoch()) {
      return absl::OkStatus();  // stopping, or a later group came meanwhile
    }
    // This plane serves; the state it carries is its own unless the run
    // still waits (then it is the last served plane's, which the carry
    // names).
    if (!still_suspended) NoteServedLocked(group);
    plane_ = plane;
    stale_workers = attached_.size();
  }
  metrics_.peer_transports->Set(plane->peer_transports);
  metrics_.regroups->Increment();
  metrics_.attached_workers->Set(0);
  STARLING_LOG(INFO) << "serving as rank " << group.rank() << " of "
                     << group.group_size() << " in group epoch "
                     << group.group_epoch() << " (data plane formed in "
                     << absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                         absl::Milliseconds(1)))
                     << "); " << stale_workers
                     << " worker(s) of the old group still connected are "
                        "refused until they reconnect";
  return absl::OkStatus();
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
  std::shared_ptr<Plane> p = plane();
  if (p == nullptr) return;
  // A plane of an earlier epoch than the link's reports nothing of it.
  if (p->group.group_epoch() != link_->group_epoch()) return;
  RunManager* runs = p->runs.get();
  MeteredTransport* transport = p->transport.get();
  // Sync modes: steps applied; parameter-server mode: updates of the shard.
  const proto::RunStatus run = runs->run_status();
  request->set_iteration(static_cast<uint64_t>(std::max<int64_t>(
      0, run.state() == proto::RunStatus::STATE_RUNNING ? run.steps() : 0)));
  std::shared_ptr<Run> current = runs->current_run();
  if (current != nullptr) {
    request->set_shard_bytes(current->store->ShardBytes());
    request->set_optimizer_state_bytes(current->optimizer->StateBytes());
  }
  int missing = 0;
  for (const proto::WorkerStatus& w : runs->workers()) {
    missing += w.state() == proto::WorkerStatus::STATE_MISSING ? 1 : 0;
    *request->add_workers() = w;
  }
  *request->mutable_run() = run;
  // For `starlingctl status`: this plane's transport to each peer.
  request->set_transport(TransportSummary(p->peer_transports));
  // The metrics that follow the heartbeat (same period, same truth).
  metrics_.missing_workers->Set(missing);
  metrics_.run_id->Set(run.state() == proto::RunStatus::STATE_RUNNING
                           ? static_cast<double>(run.run_id())
                           : 0);
  metrics_.registered_memory_bytes->Set(
      static_cast<double>(transport->registered_bytes() +
                          pool_bytes_.load(std::memory_order_relaxed)));
  const uint64_t dropped = transport->stale_writes_dropped();
  if (dropped > p->stale_writes_reported) {
    metrics_.stale_writes_dropped->Increment(
        static_cast<double>(dropped - p->stale_writes_reported));
    p->stale_writes_reported = dropped;
  }
}

void NodeDaemon::OnRunFailed(const proto::RunFailure& failure) {
  {
    // A run the coordinator failed does not go on.
    absl::MutexLock lock(&mu_);
    if (carry_.has_value() && carry_->carried.run_id == failure.run_id()) {
      STARLING_LOG(WARNING) << "run " << failure.run_id()
                            << " does not go on: the coordinator failed it ("
                            << failure.error() << ")";
      carry_.reset();
    }
  }
  std::shared_ptr<Plane> p = plane();
  if (p == nullptr || p->group.group_epoch() != link_->group_epoch()) return;
  p->runs->AbortRun(
      failure.run_id(),
      absl::AbortedError(absl::StrCat("the coordinator reports run ",
                                      failure.run_id(), " failed on rank ",
                                      failure.rank(), ": ", failure.error())),
      /*may_continue=*/false);
}

void NodeDaemon::OnRunSuspended(std::shared_ptr<Run> run, uint64_t epoch,
                                int rank, int size) {
  absl::MutexLock lock(&mu_);
  Carry carry;
  carry.carried.run_id = run->id;
  carry.carried.run = std::move(run);
  carry.carried.old_rank = rank;
  carry.carried.old_size = size;
  carry.epoch = epoch;
  carry.since = absl::Now();
  carry_ = std::move(carry);
}

std::optional<std::string> NodeDaemon::ReasonToStopForming(uint64_t epoch) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return std::string("the daemon is stopping");
  if (next_group_.has_value() && next_group_->group_epoch() > epoch) {
    return absl::StrCat("group epoch ", next_group_->group_epoch(),
                        " replaced group epoch ", epoch);
  }
  return std::nullopt;
}

void NodeDaemon::NoteServedLocked(const proto::JoinResponse& group) {
  served_epoch_ = group.group_epoch();
  served_rank_ = group.rank();
  served_size_ = group.group_size();
}

absl::Duration NodeDaemon::CarryBound() const {
  // The coordinator re-forms the group (or fails the run) within about a
  // heartbeat timeout of the loss, or of the end of its rejoin grace (the
  // run waits that long for the node); past three, nothing is coming.
  return std::max(absl::Seconds(5),
                  3 * absl::Milliseconds(config_.heartbeat_timeout_ms())) +
         absl::Milliseconds(std::max<int64_t>(0, config_.rejoin_grace_ms()));
}

bool NodeDaemon::CarryPendingLocked(absl::Time now) {
  if (!carry_.has_value()) return false;
  const absl::Duration bound = CarryBound();
  if (now - carry_->since > bound) {
    STARLING_LOG(WARNING) << "run " << carry_->carried.run_id
                          << " does not go on: no re-formed group carried it "
                          << "within " << absl::FormatDuration(bound);
    carry_.reset();
    return false;
  }
  return true;
}

void NodeDaemon::OnLostRanks(const std::vector<int>& lost_ranks) {
  std::shared_ptr<Plane> p = plane();
  // The ranks are of the link's epoch.
  if (p == nullptr || p->group.group_epoch() != link_->group_epoch()) return;
  MeteredTransport* transport = p->transport.get();
  for (int lost : lost_ranks) {
    if (lost == p->group.rank() || lost < 0 || lost >= transport->size()) {
      continue;
    }
    if (transport->PeerStatus(lost).ok()) {
      transport->AbortPeer(
          lost, absl::UnavailableError(absl::StrCat("the coordinator reports ",
                                                    transport->PeerName(lost),
                                                    " LOST (no heartbeat)")));
    }
  }
}

absl::StatusOr<proto::HelloReply> NodeDaemon::Attach(
    const WorkerHandle& worker, const proto::HelloRequest& hello) {
  proto::HelloReply reply;
  std::shared_ptr<Plane> p;
  {
    absl::MutexLock lock(&mu_);
    // A worker that comes while the plane of a re-formed group is being
    // built waits for it (bounded) instead of being turned away.
    // So does one that comes while a run that may go on waits for the
    // re-formed group that carries it (or for the coordinator to fail it).
    mu_.AwaitWithDeadline(
        absl::Condition(
            +[](NodeDaemon* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->mu_) {
              return d->stopped_ || (d->plane_ != nullptr &&
                                     !d->CarryPendingLocked(absl::Now()));
            },
            this),
        absl::Now() + std::max(kAttachWait, CarryBound()));
    if (stopped_) {
      return absl::UnavailableError(
          absl::StrCat("daemon ", SelfAt(group_.rank()), " is shutting down"));
    }
    p = plane_;
  }
  if (p == nullptr) return NoPlane();
  STARLING_RETURN_IF_ERROR(p->runs->Attach(worker, &reply));
  {
    absl::MutexLock lock(&mu_);
    attached_[worker.session] = p->group.group_epoch();
  }
  metrics_.attached_workers->Set(p->runs->attached_workers());
  if (worker.pool != nullptr) {
    pool_bytes_.fetch_add(worker.pool->size_bytes(), std::memory_order_relaxed);
  }
  reply.set_rank(p->group.rank());
  reply.set_group_size(p->group.group_size());
  reply.set_group_epoch(p->group.group_epoch());
  reply.set_local_workers(options_.local_workers);
  reply.set_daemon_address(
      absl::StrCat(options_.data_host, ":", options_.data_port));
  reply.set_parameter_count(config_.parameter_count());
  reply.set_mode(config_.mode());
  reply.set_staleness(config_.mode() == proto::JobConfig::MODE_ASYNC_SGD
                          ? config_.staleness()
                          : 0);
  *reply.mutable_job() = config_;
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
  uint64_t epoch = 0;
  std::shared_ptr<Plane> p;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = attached_.find(worker.session); it != attached_.end()) {
      epoch = it->second;
      attached_.erase(it);
    }
    p = plane_;
  }
  if (worker.pool != nullptr) {
    pool_bytes_.fetch_sub(worker.pool->size_bytes(), std::memory_order_relaxed);
  }
  // A worker of an earlier group's plane left with that plane's run.
  if (p == nullptr || p->group.group_epoch() != epoch) return;
  p->runs->Detach(worker);
  metrics_.attached_workers->Set(p->runs->attached_workers());
  // A worker that left a running run unfinished holds its slot as missing.
  for (const proto::WorkerStatus& w : p->runs->workers()) {
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
  if (std::shared_ptr<Plane> p = plane(); p != nullptr) {
    *reply.mutable_local() = p->runs->LocalRounds(now);
  }
  return reply;
}

void NodeDaemon::Handle(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  std::shared_ptr<Plane> p;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mu_);
    p = plane_;
    if (auto it = attached_.find(worker.session); it != attached_.end()) {
      epoch = it->second;
    }
  }
  if (p == nullptr) {
    Refuse(worker, request, NoPlane());
    return;
  }
  if (epoch != p->group.group_epoch()) {
    // Its rank and the group's size are those of the group it attached
    // to: it must learn the new ones before it runs again.
    Refuse(worker, request,
           absl::FailedPreconditionError(absl::StrCat(
               "the group re-formed since worker '", worker.name, "' (index ",
               worker.index, ") attached to daemon ", p->self, " (group epoch ",
               epoch, " -> ", p->group.group_epoch(),
               p->group.reformed_because().empty()
                   ? std::string()
                   : absl::StrCat(": ", p->group.reformed_because()),
               "): it reconnects to learn its rank and the group's size")));
    return;
  }
  if (request.kind_case() == proto::WorkerRequest::kSchedule) {
    AnswerSchedule(worker, request);
    return;
  }
  RunManager* runs = p->runs.get();
  RunEngine* engine = p->engine.get();
  switch (request.kind_case()) {
    case proto::WorkerRequest::kDeclareTensor:
      runs->Declare(worker, request);
      return;
    case proto::WorkerRequest::kCommitTensors:
    case proto::WorkerRequest::kCollective:
    case proto::WorkerRequest::kBarrier:
    case proto::WorkerRequest::kFinish:
      runs->Submit(worker, request);
      return;
    case proto::WorkerRequest::kPushGradients:
      engine->Push(worker, request);
      return;
    case proto::WorkerRequest::kPullParameters:
      engine->Pull(worker, request);
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
  const int64_t timeout_ms = config_.collective_timeout_ms();
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
  reply.set_version(kStarlingVersion);
  reply.set_transport("tcp");
  reply.set_local_workers(options_.local_workers);
  std::shared_ptr<Plane> p;
  {
    absl::MutexLock lock(&mu_);
    reply.set_rank(group_.rank());
    reply.set_last_error(last_error_);
    p = plane_;
  }
  if (p == nullptr) return reply;
  reply.set_transport(TransportSummary(p->peer_transports));
  RunManager* runs = p->runs.get();
  const proto::RunStatus run = runs->run_status();
  *reply.mutable_run() = run;
  if (run.state() == proto::RunStatus::STATE_RUNNING) {
    reply.set_iteration(
        static_cast<uint64_t>(std::max<int64_t>(0, run.steps())));
  }
  std::shared_ptr<Run> current = runs->current_run();
  if (current != nullptr) {
    reply.set_shard_bytes(current->store->ShardBytes());
    reply.set_optimizer_state_bytes(current->optimizer->StateBytes());
  }
  int attached = 0;
  for (const proto::WorkerStatus& w : runs->workers()) {
    attached += w.state() == proto::WorkerStatus::STATE_ATTACHED ? 1 : 0;
    *reply.add_workers() = w;
  }
  reply.set_attached_workers(attached);
  for (const proto::RunStatus& r : runs->recent_runs()) {
    *reply.add_recent_runs() = r;
  }
  return reply;
}

proto::ListShardsReply NodeDaemon::Shards() const {
  proto::ListShardsReply reply;
  std::shared_ptr<Plane> p = plane();
  if (p == nullptr) return reply;
  std::shared_ptr<Run> run = p->runs->current_run();
  if (run == nullptr) return reply;  // no run: no shard
  // This rank's parts: one per bucket of the synchronous step, one flat
  // shard for the shard owners.
  const std::vector<std::pair<uint64_t, uint64_t>> owned =
      p->engine->OwnedRanges(*run);
  for (const auto& [begin, end] : owned) {
    for (const TensorLayout::Entry& entry : run->layout.tensors) {
      const uint64_t b = std::max<uint64_t>(begin, entry.offset);
      const uint64_t e = std::min<uint64_t>(end, entry.offset + entry.elements);
      if (b >= e) continue;
      proto::ShardInfo* info = reply.add_shards();
      info->set_tensor(entry.spec.name());
      info->mutable_range()->set_rank(p->group.rank());
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
  std::shared_ptr<Plane> p = plane();
  // While the plane of a re-formed group is being built, that group with
  // its peers JOINING (not connected yet).
  const proto::JoinResponse joined = p != nullptr ? p->group : group();
  reply.set_group_epoch(joined.group_epoch());
  for (int r = 0; r < joined.peers_size(); ++r) {
    proto::PeerInfo* peer = reply.add_peers();
    *peer = joined.peers(r);
    if (r == joined.rank()) continue;
    if (p == nullptr) {
      peer->set_health(proto::NODE_HEALTH_JOINING);
    } else if (!p->transport->PeerStatus(r).ok()) {
      peer->set_health(proto::NODE_HEALTH_LOST);
    }
  }
  return reply;
}

}  // namespace node
}  // namespace starling
