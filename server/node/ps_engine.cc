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
constexpr size_t kRequestHeaderBytes = 24;
constexpr size_t kReplyHeaderBytes = 16;

void PutU32(std::vector<std::byte>* out, uint32_t v) {
  const size_t at = out->size();
  out->resize(at + 4);
  std::memcpy(out->data() + at, &v, 4);
}

void PutU64(std::vector<std::byte>* out, uint64_t v) {
  const size_t at = out->size();
  out->resize(at + 8);
  std::memcpy(out->data() + at, &v, 8);
}

uint64_t GetU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint32_t GetU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

PsEngine::PsEngine(PsEngineOptions options, transport::Transport* transport,
                   const SyncEngine* runs, NodeMetrics* metrics)
    : options_(std::move(options)),
      transport_(transport),
      runs_(runs),
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
  std::shared_ptr<Run> run = runs_->current_run();
  if (run == nullptr) return 0;
  absl::MutexLock lock(&run->ps_mu);
  return run->ps_updates;
}

absl::Status PsEngine::ApplyLocal(Run& run, absl::Span<const float> grads) {
  absl::MutexLock lock(&run.ps_mu);
  STARLING_RETURN_IF_ERROR(run.optimizer->Apply(run.store->shard_parameters(),
                                                grads, run.ps_updates + 1));
  ++run.ps_updates;
  return absl::OkStatus();
}

void PsEngine::CopyLocal(Run& run, absl::Span<float> out) {
  absl::MutexLock lock(&run.ps_mu);
  const absl::Span<const float> shard = run.store->shard_parameters();
  std::memcpy(out.data(), shard.data(), shard.size() * sizeof(float));
}

void PsEngine::Serve(int peer) {
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
    uint64_t request_id = 0;
    if (got->size() < kRequestHeaderBytes) {
      status = absl::DataLossError("short parameter-server request");
    } else {
      const uint32_t kind = GetU32(got->data());
      reply_tag = GetU32(got->data() + 4);
      request_id = GetU64(got->data() + 8);
      const uint64_t run_id = GetU64(got->data() + 16);
      const size_t body = got->size() - kRequestHeaderBytes;
      std::shared_ptr<Run> run = runs_->current_run();
      // The requester's daemon may have begun the run an instant before
      // this one (the coordinator answers every rank at once): wait a
      // little for it here, bounded.
      const absl::Time begin_deadline = absl::Now() + options_.timeout;
      while ((run == nullptr || run->id < run_id) &&
             absl::Now() < begin_deadline &&
             !stop_.load(std::memory_order_relaxed)) {
        absl::SleepFor(absl::Milliseconds(2));
        run = runs_->current_run();
      }
      const size_t shard_bytes =
          run == nullptr ? 0 : run->store->shard_elements() * sizeof(float);
      if (run == nullptr || run->id != run_id) {
        status = absl::FailedPreconditionError(absl::StrCat(
            "run ", run_id, " is not running on ", options_.self,
            run == nullptr ? std::string(" (no run is)")
                           : absl::StrCat(" (run ", run->id, " is)")));
      } else if (kind == kPush && body == shard_bytes) {
        std::vector<float> grads(run->store->shard_elements());
        std::memcpy(grads.data(), got->data() + kRequestHeaderBytes, body);
        status = ApplyLocal(*run, grads);
      } else if (kind == kPull && body == 0) {
        values.resize(run->store->shard_elements());
        CopyLocal(*run, absl::MakeSpan(values));
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
    PutU64(&reply, request_id);
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
                            uint64_t request_id, uint64_t run_id,
                            absl::Span<const float> payload,
                            absl::Span<float> out) {
  std::vector<std::byte> request;
  PutU32(&request, kind);
  PutU32(&request, reply_tag);
  PutU64(&request, request_id);
  PutU64(&request, run_id);
  const size_t at = request.size();
  request.resize(at + payload.size() * sizeof(float));
  if (!payload.empty()) {
    std::memcpy(request.data() + at, payload.data(),
                payload.size() * sizeof(float));
  }
  if (request.size() > transport_->max_control_bytes() ||
      out.size() * sizeof(float) + kReplyHeaderBytes + 256 >
          transport_->max_control_bytes()) {
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

absl::Status PsEngine::DoPush(const WorkerHandle& worker, Run& run,
                              const proto::PushGradientsRequest& push) {
  const TensorLayout* layout = &run.layout;
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
  return Exchange(worker, run, kPush, absl::MakeSpan(flat));
}

absl::Status PsEngine::DoPull(const WorkerHandle& worker, Run& run,
                              const proto::PullParametersRequest& pull) {
  const TensorLayout* layout = &run.layout;
  std::vector<float> flat(layout->total_elements, 0.0f);
  STARLING_RETURN_IF_ERROR(Exchange(worker, run, kPull, absl::MakeSpan(flat)));
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
absl::Status PsEngine::Exchange(const WorkerHandle& worker, Run& run,
                                uint32_t kind, absl::Span<float> flat) {
  const int rank = transport_->rank();
  const int size = transport_->size();
  const collective::ShardLayout shards(flat.size(), size);
  const uint32_t reply_tag = kPsReplyTagBase + worker.index;
  const uint64_t request_id =
      next_request_id_.fetch_add(1, std::memory_order_relaxed);
  absl::Status first_error;
  std::vector<bool> sent(size, false);
  for (int owner = 0; owner < size; ++owner) {
    if (owner == rank || shards.Size(owner) == 0) continue;
    absl::Span<float> part =
        flat.subspan(shards.Begin(owner), shards.Size(owner));
    absl::Status status = Call(owner, kind, reply_tag, request_id, run.id,
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
    absl::Status status = ApplyLocal(run, own);
    if (!status.ok() && first_error.ok()) first_error = status;
  } else {
    CopyLocal(run, own);
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  for (int owner = 0; owner < size; ++owner) {
    if (!sent[owner]) continue;
    absl::StatusOr<std::vector<std::byte>> got;
    // Late replies to an earlier call (it timed out) are dropped here.
    while (true) {
      got = transport_->RecvControl(owner, reply_tag, deadline);
      if (!got.ok() || got->size() < kReplyHeaderBytes ||
          GetU64(got->data() + 8) == request_id) {
        break;
      }
    }
    absl::Status status = got.status();
    if (got.ok()) {
      const size_t part_bytes =
          kind == kPull ? shards.Size(owner) * sizeof(float) : 0;
      const size_t message_bytes =
          got->size() < kReplyHeaderBytes ? 0 : GetU32(got->data() + 4);
      const bool failed = got->size() >= 4 && GetU32(got->data()) != 0;
      if (got->size() < kReplyHeaderBytes ||
          got->size() !=
              kReplyHeaderBytes + message_bytes + (failed ? 0 : part_bytes)) {
        status = absl::DataLossError("malformed parameter-server reply");
      } else {
        const uint32_t code = GetU32(got->data());
        const uint32_t length = GetU32(got->data() + 4);
        status = absl::Status(static_cast<absl::StatusCode>(code),
                              std::string(reinterpret_cast<const char*>(
                                              got->data() + kReplyHeaderBytes),
                                          length));
        if (status.ok() && kind == kPull) {
          std::memcpy(flat.data() + shards.Begin(owner),
                      got->data() + kReplyHeaderBytes + length, part_bytes);
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
  absl::StatusOr<std::shared_ptr<Run>> run = runs_->RunOf(worker);
  absl::Status status =
      run.ok() ? DoPush(worker, **run, request.push_gradients()) : run.status();
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
  absl::StatusOr<std::shared_ptr<Run>> run = runs_->RunOf(worker);
  absl::Status status = run.ok()
                            ? DoPull(worker, **run, request.pull_parameters())
                            : run.status();
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
