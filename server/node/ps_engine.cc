#include "server/node/ps_engine.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/collective/shard_layout.h"

namespace starling {
namespace node {
namespace {

constexpr uint32_t kPush = 1;
constexpr uint32_t kPull = 2;
constexpr size_t kRequestHeaderBytes = 8;

void PutU32(std::vector<std::byte>* out, uint32_t v) {
  const size_t at = out->size();
  out->resize(at + 4);
  std::memcpy(out->data() + at, &v, 4);
}

uint32_t GetU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

PsEngine::PsEngine(PsEngineOptions options, transport::Transport* transport,
                   shard::ShardStore* store, shard::Optimizer* optimizer,
                   const SyncEngine* layout_source, NodeMetrics* metrics)
    : options_(std::move(options)),
      transport_(transport),
      store_(store),
      optimizer_(optimizer),
      layout_source_(layout_source),
      metrics_(metrics) {}

PsEngine::~PsEngine() { Stop(); }

void PsEngine::Start() {
  for (int peer = 0; peer < transport_->size(); ++peer) {
    if (peer == transport_->rank()) continue;
    servers_.emplace_back([this, peer] { Serve(peer); });
  }
}

void PsEngine::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  for (std::thread& t : servers_) t.join();
  servers_.clear();
}

int64_t PsEngine::updates() const {
  absl::MutexLock lock(&mu_);
  return updates_;
}

absl::Status PsEngine::ApplyLocal(absl::Span<const float> grads) {
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(
      optimizer_->Apply(store_->shard_parameters(), grads, updates_ + 1));
  ++updates_;
  return absl::OkStatus();
}

void PsEngine::CopyLocal(absl::Span<float> out) {
  absl::MutexLock lock(&mu_);
  const absl::Span<const float> shard = store_->shard_parameters();
  std::memcpy(out.data(), shard.data(), shard.size() * sizeof(float));
}

void PsEngine::Serve(int peer) {
  const size_t shard_bytes = store_->shard_elements() * sizeof(float);
  while (!stop_.load(std::memory_order_relaxed)) {
    absl::StatusOr<std::vector<std::byte>> got = transport_->RecvControl(
        peer, kPsRequestTag, absl::Now() + absl::Milliseconds(200));
    if (absl::IsDeadlineExceeded(got.status())) continue;
    if (!got.ok()) {
      STARLING_LOG(DEBUG) << "parameter-server thread for "
                          << transport_->PeerName(peer)
                          << " ends: " << got.status();
      return;
    }
    absl::Status status;
    std::vector<float> values;
    uint32_t reply_tag = 0;
    if (got->size() < kRequestHeaderBytes) {
      status = absl::DataLossError("short parameter-server request");
    } else {
      const uint32_t kind = GetU32(got->data());
      reply_tag = GetU32(got->data() + 4);
      const size_t body = got->size() - kRequestHeaderBytes;
      if (kind == kPush && body == shard_bytes) {
        std::vector<float> grads(store_->shard_elements());
        std::memcpy(grads.data(), got->data() + kRequestHeaderBytes, body);
        status = ApplyLocal(grads);
      } else if (kind == kPull && body == 0) {
        values.resize(store_->shard_elements());
        CopyLocal(absl::MakeSpan(values));
      } else {
        status = absl::DataLossError(absl::StrCat(
            "parameter-server request kind ", kind, " with ", body,
            " bytes; the shard of ", options_.self, " holds ", shard_bytes));
      }
    }
    if (reply_tag == 0) continue;  // nowhere to answer
    std::vector<std::byte> reply;
    PutU32(&reply, static_cast<uint32_t>(status.code()));
    PutU32(&reply, static_cast<uint32_t>(status.message().size()));
    const size_t at = reply.size();
    reply.resize(at + status.message().size() + values.size() * sizeof(float));
    std::memcpy(reply.data() + at, status.message().data(),
                status.message().size());
    if (!values.empty()) {
      std::memcpy(reply.data() + at + status.message().size(), values.data(),
                  values.size() * sizeof(float));
    }
    absl::Status sent = transport_->SendControl(peer, reply_tag, reply);
    if (!sent.ok()) {
      STARLING_LOG(WARNING) << "parameter-server reply to "
                            << transport_->PeerName(peer) << ": " << sent;
    }
  }
}

absl::Status PsEngine::Call(int owner, uint32_t kind, uint32_t reply_tag,
                            absl::Span<const float> payload,
                            absl::Span<float> out) {
  std::vector<std::byte> request;
  PutU32(&request, kind);
  PutU32(&request, reply_tag);
  const size_t at = request.size();
  request.resize(at + payload.size() * sizeof(float));
  if (!payload.empty()) {
    std::memcpy(request.data() + at, payload.data(),
                payload.size() * sizeof(float));
  }
  if (request.size() > transport_->max_control_bytes() ||
      out.size() * sizeof(float) + 8 + 256 > transport_->max_control_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shard of ", transport_->PeerName(owner), " (",
                     std::max(payload.size(), out.size()) * sizeof(float),
                     " bytes) exceeds the control-message limit of ",
                     transport_->max_control_bytes(),
                     " bytes of parameter-server mode version 1"));
  }
  STARLING_RETURN_IF_ERROR(
      transport_->SendControl(owner, kPsRequestTag, request));
  return absl::OkStatus();
}

absl::Status PsEngine::DoPush(const WorkerHandle& worker,
                              const proto::PushGradientsRequest& push) {
  const TensorLayout* layout = layout_source_->layout();
  if (layout == nullptr) {
    return absl::FailedPreconditionError("tensors not committed");
  }
  std::vector<float> flat(layout->total_elements, 0.0f);
  for (const proto::PoolSlice& slice : push.slices()) {
    STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                              layout->Find(slice.tensor()));
    if (slice.elements() != entry->elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                       " elements pushed, ", entry->elements, " declared"));
    }
    STARLING_ASSIGN_OR_RETURN(absl::Span<float> src,
                              worker.pool->Floats(slice));
    std::memcpy(flat.data() + entry->offset, src.data(),
                src.size() * sizeof(float));
  }
  return Exchange(worker, kPush, absl::MakeSpan(flat));
}

absl::Status PsEngine::DoPull(const WorkerHandle& worker,
                              const proto::PullParametersRequest& pull) {
  const TensorLayout* layout = layout_source_->layout();
  if (layout == nullptr) {
    return absl::FailedPreconditionError("tensors not committed");
  }
  std::vector<float> flat(layout->total_elements, 0.0f);
  STARLING_RETURN_IF_ERROR(Exchange(worker, kPull, absl::MakeSpan(flat)));
  for (const proto::PoolSlice& slice : pull.slices()) {
    STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                              layout->Find(slice.tensor()));
    if (slice.elements() != entry->elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                       " elements asked, ", entry->elements, " declared"));
    }
    STARLING_ASSIGN_OR_RETURN(absl::Span<float> dst,
                              worker.pool->Floats(slice));
    std::memcpy(dst.data(), flat.data() + entry->offset,
                dst.size() * sizeof(float));
  }
  return absl::OkStatus();
}

// Sends every remote owner its part first, then applies (or reads) the own
// shard, then collects the replies: the owners work in parallel.
absl::Status PsEngine::Exchange(const WorkerHandle& worker, uint32_t kind,
                                absl::Span<float> flat) {
  const int rank = transport_->rank();
  const int size = transport_->size();
  const collective::ShardLayout shards(flat.size(), size);
  const uint32_t reply_tag = kPsReplyTagBase + worker.index;
  absl::Status first_error;
  std::vector<bool> sent(size, false);
  for (int owner = 0; owner < size; ++owner) {
    if (owner == rank || shards.Size(owner) == 0) continue;
    absl::Span<float> part =
        flat.subspan(shards.Begin(owner), shards.Size(owner));
    absl::Status status = Call(owner, kind, reply_tag,
                               kind == kPush ? absl::Span<const float>(part)
                                             : absl::Span<const float>(),
                               part);
    if (!status.ok()) {
      if (first_error.ok()) {
        first_error = Annotate(
            status, absl::StrCat("shard owner ", transport_->PeerName(owner)));
      }
      continue;
    }
    sent[owner] = true;
  }
  absl::Span<float> own = flat.subspan(shards.Begin(rank), shards.Size(rank));
  if (kind == kPush) {
    absl::Status status = ApplyLocal(own);
    if (!status.ok() && first_error.ok()) first_error = status;
  } else {
    CopyLocal(own);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (int owner = 0; owner < size; ++owner) {
    if (!sent[owner]) continue;
    absl::StatusOr<std::vector<std::byte>> got =
        transport_->RecvControl(owner, reply_tag, deadline);
    absl::Status status = got.status();
    if (got.ok()) {
      const size_t part_bytes =
          kind == kPull ? shards.Size(owner) * sizeof(float) : 0;
      if (got->size() < 8 ||
          got->size() != 8 + GetU32(got->data() + 4) + part_bytes) {
        status = absl::DataLossError("malformed parameter-server reply");
      } else {
        const uint32_t code = GetU32(got->data());
        const uint32_t length = GetU32(got->data() + 4);
        status = absl::Status(
            static_cast<absl::StatusCode>(code),
            std::string(reinterpret_cast<const char*>(got->data() + 8),
                        length));
        if (status.ok() && kind == kPull) {
          std::memcpy(flat.data() + shards.Begin(owner),
                      got->data() + 8 + length, part_bytes);
        }
      }
    }
    if (!status.ok() && first_error.ok()) {
      first_error = Annotate(
          status, absl::StrCat("shard owner ", transport_->PeerName(owner)));
    }
  }
  return first_error;
}

void PsEngine::Push(const WorkerHandle& worker,
                    const proto::WorkerRequest& request) {
  const absl::Time start = absl::Now();
  absl::Status status = DoPush(worker, request.push_gradients());
  if (!status.ok()) {
    status =
        Annotate(status, absl::StrCat("parameter-server push of step ",
                                      request.push_gradients().step(), " from ",
                                      worker.name, " on ", options_.self));
  }
  metrics_->pushes->Increment();
  metrics_->push_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  worker.responder->Reply(request.id(), status);
}

void PsEngine::Pull(const WorkerHandle& worker,
                    const proto::WorkerRequest& request) {
  const absl::Time start = absl::Now();
  absl::Status status = DoPull(worker, request.pull_parameters());
  if (!status.ok()) {
    status = Annotate(status, absl::StrCat("parameter-server pull from ",
                                           worker.name, " on ", options_.self));
  }
  metrics_->pulls->Increment();
  metrics_->pull_seconds->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  worker.responder->Reply(request.id(), status);
}

}  // namespace node
}  // namespace starling
