#include "server/node/sync_engine.h"

#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace node {
namespace {

absl::Span<std::byte> AsBytes(absl::Span<float> data) {
  return {reinterpret_cast<std::byte*>(data.data()),
          data.size() * sizeof(float)};
}

// "push", "all_reduce", ... for mismatch messages.
const char* KindName(const proto::WorkerRequest& request) {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kCommitTensors:
      return "end of declarations";
    case proto::WorkerRequest::kPushGradients:
      return "push_gradients";
    case proto::WorkerRequest::kAllReduce:
      return "all_reduce";
    case proto::WorkerRequest::kBarrier:
      return "barrier";
    default:
      return "request";
  }
}

}  // namespace

SyncEngine::SyncEngine(
    SyncEngineOptions options, collective::Communicator* comm,
    transport::Transport* transport, DeclaredTensors* declared,
    shard::ShardStore* store, shard::Optimizer* optimizer, NodeMetrics* metrics,
    std::function<void(int64_t, const absl::Status&)> on_step)
    : options_(std::move(options)),
      comm_(comm),
      transport_(transport),
      declared_(declared),
      store_(store),
      optimizer_(optimizer),
      metrics_(metrics),
      on_step_(std::move(on_step)) {
  absl::MutexLock lock(&mu_);
  queues_.resize(options_.local_workers);
}

SyncEngine::~SyncEngine() { Stop(); }

void SyncEngine::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void SyncEngine::Stop() {
  std::vector<Round> dropped;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    for (auto& queue : queues_) {
      for (Round& round : queue) dropped.push_back(std::move(round));
      queue.clear();
    }
  }
  for (Round& round : dropped) {
    round.worker.responder->Reply(
        round.request.id(),
        absl::UnavailableError(
            absl::StrCat("daemon ", options_.self, " is shutting down")));
  }
  if (thread_.joinable()) thread_.join();
}

std::string SyncEngine::Describe(const proto::WorkerRequest& request) const {
  switch (request.kind_case()) {
    case proto::WorkerRequest::kPushGradients:
      return absl::StrCat("step ", request.push_gradients().step(), " on ",
                          options_.self);
    case proto::WorkerRequest::kAllReduce:
      return absl::StrCat("all_reduce of ",
                          request.all_reduce().slice().elements(),
                          " floats on ", options_.self);
    default:
      return absl::StrCat(KindName(request), " on ", options_.self);
  }
}

void SyncEngine::Submit(const WorkerHandle& worker,
                        const proto::WorkerRequest& request) {
  absl::Status refuse;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) {
      refuse = absl::UnavailableError(
          absl::StrCat("daemon ", options_.self, " is shutting down"));
    } else if (!missing_.ok()) {
      refuse = Annotate(missing_, Describe(request));
    } else if (worker.index < 0 || worker.index >= options_.local_workers) {
      refuse = absl::InternalError("worker index out of range");
    } else {
      queues_[worker.index].push_back(Round{worker, request, absl::Now()});
      return;
    }
  }
  worker.responder->Reply(request.id(), refuse);
}

void SyncEngine::DropWorker(int index, const std::string& name) {
  std::vector<Round> failed;
  absl::Status missing;
  {
    absl::MutexLock lock(&mu_);
    if (index < 0 || index >= static_cast<int>(queues_.size())) return;
    queues_[index].clear();  // nobody listens any more
    if (missing_.ok()) {
      missing_ = absl::UnavailableError(absl::StrCat(
          "local worker '", name, "' (index ", index, ") of ", options_.self,
          " left; every local worker must take part in each collective"));
    }
    missing = missing_;
    for (auto& queue : queues_) {
      for (Round& round : queue) failed.push_back(std::move(round));
      queue.clear();
    }
  }
  for (Round& round : failed) {
    round.worker.responder->Reply(round.request.id(),
                                  Annotate(missing, Describe(round.request)));
  }
}

const TensorLayout* SyncEngine::layout() const {
  absl::MutexLock lock(&mu_);
  return layout_.get();
}

int SyncEngine::total_workers() const {
  absl::MutexLock lock(&mu_);
  return total_workers_;
}

int64_t SyncEngine::applied_version() const {
  absl::MutexLock lock(&mu_);
  return applied_version_;
}

absl::Status SyncEngine::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void SyncEngine::Loop() {
  while (true) {
    std::vector<Round> rounds;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (stop_) return true;
        for (const auto& queue : queues_) {
          if (queue.empty()) return false;
        }
        return true;
      };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      for (auto& queue : queues_) {
        rounds.push_back(std::move(queue.front()));
        queue.pop_front();
      }
    }
    proto::WorkerResponse reply;
    absl::Status status = Execute(rounds, &reply);
    const bool is_step =
        rounds[0].request.kind_case() == proto::WorkerRequest::kPushGradients;
    if (!status.ok()) {
      metrics_->step_failures->Increment();
      STARLING_LOG(ERROR) << status;
    }
    for (Round& round : rounds) {
      round.worker.responder->Reply(round.request.id(), status, reply);
      if (is_step) {
        metrics_->pushes->Increment();
        metrics_->push_seconds->Observe(
            absl::ToDoubleSeconds(absl::Now() - round.submitted));
      }
    }
    if (is_step && on_step_ != nullptr) {
      on_step_(rounds[0].request.push_gradients().step(), status);
    }
  }
}

absl::Status SyncEngine::CheckSame(const std::vector<Round>& rounds) const {
  const proto::WorkerRequest& first = rounds[0].request;
  for (size_t i = 1; i < rounds.size(); ++i) {
    const proto::WorkerRequest& other = rounds[i].request;
    bool same = first.kind_case() == other.kind_case();
    if (same && first.has_push_gradients()) {
      same = first.push_gradients().step() == other.push_gradients().step();
    }
    if (same && first.has_all_reduce()) {
      same = first.all_reduce().slice().elements() ==
             other.all_reduce().slice().elements();
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "local workers of ", options_.self,
          " made different collective calls: ", rounds[0].worker.name, " ",
          Describe(first), ", ", rounds[i].worker.name, " ", Describe(other)));
    }
  }
  return absl::OkStatus();
}

absl::Status SyncEngine::Execute(std::vector<Round>& rounds,
                                 proto::WorkerResponse* reply) {
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
  }
  absl::Status status = CheckSame(rounds);
  if (status.ok()) {
    switch (rounds[0].request.kind_case()) {
      case proto::WorkerRequest::kCommitTensors:
        status = Commit(rounds, reply);
        break;
      case proto::WorkerRequest::kPushGradients:
        status = Step(rounds);
        break;
      case proto::WorkerRequest::kAllReduce:
        status = AllReduce(rounds);
        break;
      case proto::WorkerRequest::kBarrier:
        status = Annotate(comm_->Barrier(collective::CallOptions{
                              collective::Algorithm::kAuto, options_.timeout}),
                          absl::StrCat("barrier on ", options_.self));
        break;
      default:
        status = absl::InternalError("not a round");
    }
  }
  if (!status.ok()) {
    // A peer that died makes others time out on the survivors it was
    // talking to; name every peer this transport has lost, so that the
    // error names the dead rank too.
    std::string lost;
    for (int peer = 0; peer < transport_->size(); ++peer) {
      if (peer == transport_->rank()) continue;
      const absl::Status peer_status = transport_->PeerStatus(peer);
      // Peers the message names already need no repeating.
      if (!peer_status.ok() &&
          !absl::StrContains(status.message(), transport_->PeerName(peer))) {
        absl::StrAppend(&lost, lost.empty() ? "" : "; ",
                        transport_->PeerName(peer), ": ",
                        peer_status.message());
      }
    }
    if (!lost.empty()) {
      status = absl::Status(
          status.code(),
          absl::StrCat(status.message(), " [peers lost: ", lost, "]"));
    }
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
  }
  return status;
}

absl::Status SyncEngine::Commit(std::vector<Round>& rounds,
                                proto::WorkerResponse* reply) {
  const int rank = transport_->rank();
  const int size = transport_->size();
  std::vector<int> workers;
  for (const Round& round : rounds) workers.push_back(round.worker.index);
  proto::DeclaredTensorTable mine;
  mine.set_rank(rank);
  mine.set_local_workers(options_.local_workers);
  absl::StatusOr<std::vector<proto::TensorSpec>> local =
      declared_->LocalTable(workers);
  if (local.ok()) {
    for (const proto::TensorSpec& spec : *local) *mine.add_tensors() = spec;
  } else {
    mine.set_error(std::string(local.status().message()));
  }
  const std::string bytes = mine.SerializeAsString();
  const absl::Span<const std::byte> message(
      reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    STARLING_RETURN_IF_ERROR(
        Annotate(transport_->SendControl(peer, kLayoutTag, message),
                 absl::StrCat("sending the tensor table of ", options_.self)));
  }
  std::vector<proto::DeclaredTensorTable> tables(size);
  tables[rank] = mine;
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::vector<std::byte>> got =
        transport_->RecvControl(peer, kLayoutTag, deadline);
    if (!got.ok()) {
      return Annotate(
          got.status(),
          absl::StrCat("waiting for the tensor table of ",
                       transport_->PeerName(peer), " on ", options_.self));
    }
    if (!tables[peer].ParseFromArray(got->data(),
                                     static_cast<int>(got->size()))) {
      return absl::DataLossError(absl::StrCat("unparsable tensor table from ",
                                              transport_->PeerName(peer)));
    }
  }
  int total_workers = 0;
  for (const proto::DeclaredTensorTable& table : tables) {
    if (!table.error().empty()) {
      return absl::InvalidArgumentError(table.error());
    }
    total_workers += table.local_workers();
  }
  STARLING_RETURN_IF_ERROR(CompareTables(tables));
  auto layout = std::make_unique<TensorLayout>(
      TensorLayout::FromSpecs(std::vector<proto::TensorSpec>(
          mine.tensors().begin(), mine.tensors().end())));
  if (layout->total_elements != options_.parameter_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the declared tensors hold ", layout->total_elements,
        " elements but the job's parameter count is ", options_.parameter_count,
        " (starling-coordinator --parameter_count)"));
  }
  for (const TensorLayout::Entry& entry : layout->tensors) {
    if (entry.spec.dtype() != proto::DATA_TYPE_FLOAT32) {
      return absl::UnimplementedError(absl::StrCat(
          "tensor '", entry.spec.name(), "' is ", DescribeSpec(entry.spec),
          ": this version moves float32 tensors only"));
    }
  }
  STARLING_RETURN_IF_ERROR(
      optimizer_->SetGradientScale(1.0f / static_cast<float>(total_workers)));
  reply->mutable_commit()->set_total_workers(total_workers);
  absl::MutexLock lock(&mu_);
  layout_ = std::move(layout);
  total_workers_ = total_workers;
  return absl::OkStatus();
}

absl::Status SyncEngine::Step(std::vector<Round>& rounds) {
  const int64_t step = rounds[0].request.push_gradients().step();
  const std::string where = absl::StrCat("step ", step, " on ", options_.self);
  const TensorLayout* layout;
  {
    absl::MutexLock lock(&mu_);
    layout = layout_.get();
    if (layout == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": tensors not committed"));
    }
    if (step != applied_version_) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": pushed for step ", step,
                       " but the next step is ", applied_version_));
    }
    // Block new pulls and wait for the current readers to leave.
    updating_ = true;
    mu_.Await(absl::Condition(
        +[](int* readers) { return *readers == 0; }, &readers_));
  }
  const absl::Time start = absl::Now();
  absl::Status status = [&]() -> absl::Status {
    store_->ZeroGradients();
    absl::Span<float> grads = store_->gradients();
    for (Round& round : rounds) {
      for (const proto::PoolSlice& slice :
           round.request.push_gradients().slices()) {
        STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                                  layout->Find(slice.tensor()));
        if (slice.elements() != entry->elements) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", slice.tensor(), "' from ",
                           round.worker.name, ": ", slice.elements(),
                           " elements pushed, ", entry->elements, " declared"));
        }
        STARLING_ASSIGN_OR_RETURN(absl::Span<float> src,
                                  round.worker.pool->Floats(slice));
        float* dst = grads.data() + entry->offset;
        for (size_t i = 0; i < src.size(); ++i) dst[i] += src[i];
      }
    }
    const collective::CallOptions call{collective::Algorithm::kAuto,
                                       options_.timeout};
    const absl::Time comm_start = absl::Now();
    STARLING_RETURN_IF_ERROR(Annotate(
        comm_->ReduceScatter(AsBytes(grads), collective::DataType::kFloat32,
                             collective::ReduceOp::kSum, call),
        "reduce-scatter"));
    absl::Duration comm = absl::Now() - comm_start;
    STARLING_RETURN_IF_ERROR(
        Annotate(optimizer_->Apply(store_->shard_parameters(),
                                   store_->shard_gradients(), step + 1),
                 "optimizer"));
    const absl::Time gather_start = absl::Now();
    STARLING_RETURN_IF_ERROR(
        Annotate(comm_->AllGather(AsBytes(store_->parameters()),
                                  collective::DataType::kFloat32, call),
                 "all-gather"));
    comm += absl::Now() - gather_start;
    metrics_->allreduce_seconds->Observe(absl::ToDoubleSeconds(comm));
    metrics_->collective_bytes->Increment(2.0 * grads.size() * sizeof(float));
    return absl::OkStatus();
  }();
  absl::MutexLock lock(&mu_);
  updating_ = false;
  if (!status.ok()) return Annotate(status, where);
  applied_version_ = step + 1;
  metrics_->steps->Increment();
  metrics_->step_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status SyncEngine::AllReduce(std::vector<Round>& rounds) {
  const std::string where = Describe(rounds[0].request);
  const size_t elements = rounds[0].request.all_reduce().slice().elements();
  scratch_.assign(elements, 0.0f);
  std::vector<absl::Span<float>> buffers;
  for (Round& round : rounds) {
    absl::StatusOr<absl::Span<float>> src =
        round.worker.pool->Floats(round.request.all_reduce().slice());
    if (!src.ok()) return Annotate(src.status(), where);
    for (size_t i = 0; i < elements; ++i) scratch_[i] += (*src)[i];
    buffers.push_back(*src);
  }
  const absl::Time start = absl::Now();
  STARLING_RETURN_IF_ERROR(Annotate(
      comm_->AllReduce(AsBytes(absl::MakeSpan(scratch_)),
                       collective::DataType::kFloat32,
                       collective::ReduceOp::kSum,
                       collective::CallOptions{collective::Algorithm::kAuto,
                                               options_.timeout}),
      where));
  metrics_->allreduce_seconds->Observe(
      absl::ToDoubleSeconds(absl::Now() - start));
  metrics_->collective_bytes->Increment(elements * sizeof(float));
  for (absl::Span<float> dst : buffers) {
    std::memcpy(dst.data(), scratch_.data(), elements * sizeof(float));
  }
  return absl::OkStatus();
}

void SyncEngine::Pull(const WorkerHandle& worker,
                      const proto::WorkerRequest& request) {
  const int64_t version = request.pull_parameters().version();
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + options_.timeout;
  const TensorLayout* layout = nullptr;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || !error_.ok() ||
             (applied_version_ >= version && !updating_);
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    if (!error_.ok()) {
      status = error_;
    } else if (stop_) {
      status = absl::UnavailableError(
          absl::StrCat("daemon ", options_.self, " is shutting down"));
    } else if (applied_version_ < version || updating_) {
      status = absl::DeadlineExceededError(absl::StrCat(
          "parameters of version ", version, " not ready within ",
          absl::FormatDuration(options_.timeout), " on ", options_.self,
          " (version ", applied_version_,
          " applied; every worker of the job must push each step)"));
    } else if (layout_ == nullptr) {
      status = absl::FailedPreconditionError("tensors not committed");
    } else {
      layout = layout_.get();
      ++readers_;
    }
  }
  if (status.ok()) {
    const absl::Span<const float> params = store_->parameters();
    for (const proto::PoolSlice& slice : request.pull_parameters().slices()) {
      absl::StatusOr<const TensorLayout::Entry*> entry =
          layout->Find(slice.tensor());
      if (!entry.ok()) {
        status = entry.status();
        break;
      }
      if (slice.elements() != (*entry)->elements) {
        status = absl::InvalidArgumentError(
            absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                         " elements asked, ", (*entry)->elements, " declared"));
        break;
      }
      absl::StatusOr<absl::Span<float>> dst = worker.pool->Floats(slice);
      if (!dst.ok()) {
        status = dst.status();
        break;
      }
      std::memcpy(dst->data(), params.data() + (*entry)->offset,
                  dst->size() * sizeof(float));
    }
    absl::MutexLock lock(&mu_);
    --readers_;
  }
  metrics_->pulls->Increment();
  metrics_->pull_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  worker.responder->Reply(request.id(), status);
}

}  // namespace node
}  // namespace starling
