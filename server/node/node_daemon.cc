#include "server/node/node_daemon.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/base/grpc_status.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/coordinator/coordinator_options.h"
#include "server/shard/optimizer/optimizer_factory.h"
#include "server/transport/peer_address.h"
#include "server/transport/tcp/tcp_options.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace node {
namespace {

std::string LocalHostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace

NodeDaemon::NodeDaemon(NodeOptions options, NodeMetrics metrics)
    : options_(std::move(options)), metrics_(metrics) {}

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
  STARLING_ASSIGN_OR_RETURN(NodeMetrics metrics,
                            NodeMetrics::Register(registry));
  std::unique_ptr<NodeDaemon> daemon(new NodeDaemon(options, metrics));
  STARLING_RETURN_IF_ERROR(daemon->Join());
  STARLING_RETURN_IF_ERROR(daemon->OpenDataPlane());
  daemon->heartbeat_ = std::thread([d = daemon.get()] { d->HeartbeatLoop(); });
  return daemon;
}

absl::Status NodeDaemon::Join() {
  const absl::Time deadline = absl::Now() + options_.join_timeout;
  channel_ = grpc::CreateChannel(options_.coordinator,
                                 grpc::InsecureChannelCredentials());
  coordinator_ = proto::Coordinator::NewStub(channel_);
  const std::string unreachable =
      absl::StrCat("could not reach the coordinator at ", options_.coordinator,
                   " within ", absl::FormatDuration(options_.join_timeout));
  proto::JoinRequest request;
  request.set_job_id(options_.job_id);
  request.set_hostname(options_.hostname);
  request.set_data_address(
      absl::StrCat(options_.data_host, ":", options_.data_port));
  if (options_.admin_port > 0) {
    request.set_admin_address(
        absl::StrCat(options_.data_host, ":", options_.admin_port));
  }
  request.set_version(coordinator::kStarlingVersion);
  request.mutable_capabilities()->set_local_workers(options_.local_workers);
  while (true) {
    if (!channel_->WaitForConnected(absl::ToChronoTime(deadline))) {
      return absl::UnavailableError(unreachable);
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    request.set_wait_timeout_ms(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(deadline - absl::Now())));
    grpc::Status status = coordinator_->Join(&context, request, &join_);
    if (status.ok()) break;
    // The coordinator restarted or the connection broke: try again.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
        absl::Now() + absl::Milliseconds(100) < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    return FromGrpcStatus(
        status, absl::StrCat("joining job ", options_.job_id,
                             " at the coordinator ", options_.coordinator));
  }
  STARLING_LOG(INFO) << "joined job " << options_.job_id << " as rank "
                     << join_.rank() << " of " << join_.group_size();
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
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<transport::tcp::TcpTransport> tcp_t,
                            transport::tcp::TcpTransport::Create(tcp));
  transport_ = std::move(tcp_t);
  collective::CommunicatorOptions comm_options;
  if (config.collective_timeout_ms() > 0) {
    comm_options.timeout = absl::Milliseconds(config.collective_timeout_ms());
  }
  STARLING_ASSIGN_OR_RETURN(
      comm_, collective::Communicator::Create(transport_.get(), comm_options));

  shard::ShardStoreOptions store_options;
  store_options.total_elements = config.parameter_count();
  store_options.ranks = size;
  store_options.rank = rank;
  STARLING_ASSIGN_OR_RETURN(store_, shard::ShardStore::Create(store_options));
  shard::OptimizerOptions optimizer_options;
  optimizer_options.name = config.optimizer();
  optimizer_options.learning_rate = static_cast<float>(config.learning_rate());
  if (optimizer_options.name == "none") {
    // Plain all-reduce jobs: the shard is never updated.
    optimizer_options.name = "sgd";
    optimizer_options.learning_rate = 0.0f;
  }
  STARLING_ASSIGN_OR_RETURN(
      optimizer_,
      shard::CreateOptimizer(optimizer_options, store_->shard_elements()));
  metrics_.shard_bytes->Set(static_cast<double>(store_->ShardBytes()));
  metrics_.optimizer_state_bytes->Set(
      static_cast<double>(optimizer_->StateBytes()));
  metrics_.group_size->Set(size);

  declared_ = std::make_unique<DeclaredTensors>(rank);
  const bool ps = config.mode() == proto::JobConfig::MODE_PARAMETER_SERVER;
  SyncEngineOptions sync_options;
  sync_options.local_workers = options_.local_workers;
  sync_options.pushes_are_rounds = !ps;
  sync_options.timeout = comm_options.timeout;
  sync_options.parameter_count = config.parameter_count();
  sync_options.self = Self();
  sync_ = std::make_unique<SyncEngine>(
      sync_options, comm_.get(), transport_.get(), declared_.get(),
      store_.get(), optimizer_.get(), &metrics_,
      [this](int64_t step, const absl::Status& status) {
        OnStep(step, status);
      });
  sync_->Start();
  if (ps) {
    PsEngineOptions ps_options;
    ps_options.timeout = comm_options.timeout;
    ps_options.self = Self();
    ps_ = std::make_unique<PsEngine>(ps_options, transport_.get(), store_.get(),
                                     optimizer_.get(), sync_.get(), &metrics_);
    ps_->Start();
  }
  STARLING_ASSIGN_OR_RETURN(worker_server_,
                            WorkerServer::Start(options_.worker_socket, this));
  return absl::OkStatus();
}

void NodeDaemon::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  // The engines first: that wakes pulls waiting in workers' reader
  // threads, which the worker server then joins.
  if (sync_ != nullptr) sync_->Stop();
  if (ps_ != nullptr) ps_->Stop();
  if (worker_server_ != nullptr) worker_server_->Stop();
  stop_heartbeat_.Notify();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void NodeDaemon::OnStep(int64_t step, const absl::Status& status) {
  if (status.ok()) return;
  absl::MutexLock lock(&mu_);
  last_error_ = std::string(status.message());
  proto::StepReport report;
  report.set_job_id(options_.job_id);
  report.set_rank(join_.rank());
  report.set_iteration(static_cast<uint64_t>(step));
  report.set_error(last_error_);
  reports_.push_back(std::move(report));
}

void NodeDaemon::HeartbeatLoop() {
  const proto::JobConfig& config = join_.config();
  const absl::Duration period =
      config.heartbeat_interval_ms() > 0
          ? absl::Milliseconds(config.heartbeat_interval_ms())
          : absl::Seconds(1);
  bool warned = false;
  while (!stop_heartbeat_.WaitForNotificationWithTimeout(period)) {
    std::vector<proto::StepReport> reports;
    {
      absl::MutexLock lock(&mu_);
      reports.swap(reports_);
    }
    for (const proto::StepReport& report : reports) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + period));
      proto::StepReportAck ack;
      // Best effort: the coordinator learns of failures by heartbeat too.
      coordinator_->ReportStep(&context, report, &ack).error_code();
    }
    proto::HeartbeatRequest request;
    request.set_job_id(options_.job_id);
    request.set_rank(join_.rank());
    request.set_group_epoch(join_.group_epoch());
    // Sync modes: steps applied; parameter-server mode: updates of the shard.
    request.set_iteration(static_cast<uint64_t>(
        ps_ != nullptr ? ps_->updates() : sync_->applied_version()));
    request.set_shard_bytes(store_->ShardBytes());
    request.set_optimizer_state_bytes(optimizer_->StateBytes());
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + period));
    proto::HeartbeatResponse response;
    grpc::Status status = coordinator_->Heartbeat(&context, request, &response);
    if (!status.ok()) {
      if (!warned) {
        STARLING_LOG(WARNING) << "heartbeat to " << options_.coordinator << ": "
                              << FromGrpcStatus(status);
        warned = true;
      }
      continue;
    }
    warned = false;
    for (int lost : response.lost_ranks()) {
      if (lost == join_.rank() || lost < 0 || lost >= transport_->size()) {
        continue;
      }
      if (transport_->PeerStatus(lost).ok()) {
        transport_->AbortPeer(
            lost, absl::UnavailableError(absl::StrCat(
                      "the coordinator reports ", transport_->PeerName(lost),
                      " LOST (no heartbeat)")));
      }
    }
  }
}

absl::StatusOr<proto::HelloReply> NodeDaemon::Attach(
    const proto::HelloRequest& hello) {
  if (hello.worker_index() < 0 ||
      hello.worker_index() >= options_.local_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", hello.worker_index(), " is outside 0..",
                     options_.local_workers - 1, " (", Self(),
                     " runs --local_workers=", options_.local_workers, ")"));
  }
  proto::HelloReply reply;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) {
      return absl::UnavailableError(
          absl::StrCat("daemon ", Self(), " is shutting down"));
    }
    auto [it, inserted] =
        attached_.emplace(hello.worker_index(), hello.worker_name());
    if (!inserted) {
      return absl::AlreadyExistsError(
          absl::StrCat("worker index ", hello.worker_index(), " on ", Self(),
                       " is taken by '", it->second, "'"));
    }
    metrics_.attached_workers->Set(static_cast<double>(attached_.size()));
  }
  reply.set_rank(join_.rank());
  reply.set_group_size(join_.group_size());
  reply.set_local_workers(options_.local_workers);
  reply.set_daemon_address(
      absl::StrCat(options_.data_host, ":", options_.data_port));
  reply.set_parameter_count(join_.config().parameter_count());
  reply.set_mode(join_.config().mode());
  STARLING_LOG(INFO) << "worker '" << hello.worker_name() << "' (index "
                     << hello.worker_index() << ") attached";
  return reply;
}

void NodeDaemon::Detach(int index) {
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    auto it = attached_.find(index);
    if (it != attached_.end()) name = it->second;
    attached_.erase(index);
    metrics_.attached_workers->Set(static_cast<double>(attached_.size()));
  }
  STARLING_LOG(INFO) << "worker '" << name << "' (index " << index
                     << ") detached";
  sync_->DropWorker(index, name);
}

void NodeDaemon::Handle(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kDeclareTensor: {
      absl::Status status =
          sync_->layout() != nullptr
              ? absl::FailedPreconditionError(absl::StrCat(
                    "tensor '", request.declare_tensor().spec().name(),
                    "' declared after the declarations ended (first push, "
                    "pull, all-reduce or barrier) on ",
                    Self()))
              : declared_->Declare(worker.index,
                                   request.declare_tensor().spec());
      worker.responder->Reply(request.id(), status);
      return;
    }
    case proto::WorkerRequest::kCommitTensors:
    case proto::WorkerRequest::kAllReduce:
    case proto::WorkerRequest::kBarrier:
      sync_->Submit(worker, request);
      return;
    case proto::WorkerRequest::kPushGradients:
      if (ps_ != nullptr) {
        ps_->Push(worker, request);
      } else {
        sync_->Submit(worker, request);
      }
      return;
    case proto::WorkerRequest::kPullParameters:
      if (ps_ != nullptr) {
        ps_->Pull(worker, request);
      } else {
        sync_->Pull(worker, request);
      }
      return;
    default:
      worker.responder->Reply(
          request.id(),
          absl::InvalidArgumentError("unknown or repeated worker request"));
  }
}

proto::NodeStatusReply NodeDaemon::Status() const {
  proto::NodeStatusReply reply;
  reply.set_rank(join_.rank());
  reply.set_version(coordinator::kStarlingVersion);
  reply.set_transport("tcp");
  reply.set_iteration(static_cast<uint64_t>(
      ps_ != nullptr ? ps_->updates() : sync_->applied_version()));
  reply.set_shard_bytes(store_->ShardBytes());
  reply.set_optimizer_state_bytes(optimizer_->StateBytes());
  absl::MutexLock lock(&mu_);
  reply.set_attached_workers(static_cast<int>(attached_.size()));
  reply.set_last_error(last_error_);
  return reply;
}

proto::ListShardsReply NodeDaemon::Shards() const {
  proto::ListShardsReply reply;
  const uint64_t begin = store_->shard_begin();
  const uint64_t end = store_->shard_end();
  const TensorLayout* layout = sync_->layout();
  if (layout == nullptr) {
    proto::ShardInfo* info = reply.add_shards();
    info->mutable_range()->set_rank(join_.rank());
    info->mutable_range()->set_begin_element(begin);
    info->mutable_range()->set_end_element(end);
    info->set_dtype(proto::DATA_TYPE_FLOAT32);
    info->set_bytes((end - begin) * sizeof(float));
    return reply;
  }
  for (const TensorLayout::Entry& entry : layout->tensors) {
    const uint64_t b = std::max<uint64_t>(begin, entry.offset);
    const uint64_t e = std::min<uint64_t>(end, entry.offset + entry.elements);
    if (b >= e) continue;
    proto::ShardInfo* info = reply.add_shards();
    info->set_tensor(entry.spec.name());
    info->mutable_range()->set_rank(join_.rank());
    info->mutable_range()->set_begin_element(b);
    info->mutable_range()->set_end_element(e);
    info->set_dtype(entry.spec.dtype());
    info->set_bytes((e - b) * sizeof(float));
  }
  return reply;
}

proto::GroupReply NodeDaemon::Group() const {
  proto::GroupReply reply;
  reply.set_group_epoch(join_.group_epoch());
  for (int r = 0; r < join_.peers_size(); ++r) {
    proto::PeerInfo* peer = reply.add_peers();
    *peer = join_.peers(r);
    if (r != join_.rank() && !transport_->PeerStatus(r).ok()) {
      peer->set_health(proto::NODE_HEALTH_LOST);
    }
  }
  return reply;
}

}  // namespace node
}  // namespace starling
