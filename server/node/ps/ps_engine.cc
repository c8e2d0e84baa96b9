#include "server/node/ps/ps_engine.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"
#include "server/collective/data_type.h"
#include "server/collective/shard_layout.h"
#include "server/node/ps/ps_wire.h"
#include "server/node/run/float_bytes.h"
#include "server/shard/optimizer/easgd.h"
#include "server/transport/await_writes.h"

namespace starling {
namespace node {
PsEngine::PsEngine(PsEngineOptions options, RunManager* runs,
                   transport::Transport* transport,
                   collective::Communicator* comm, NodeMetrics* metrics)
    : options_(std::move(options)),
      runs_(runs),
      transport_(transport),
      comm_(comm),
      metrics_(metrics) {}

PsEngine::~PsEngine() { Stop(); }

void PsEngine::Start() {
  for (int peer = 0; peer < transport_->size(); ++peer) {
    if (peer == transport_->rank()) continue;
    servers_.emplace_back([this, peer] { Serve(peer); });
  }
  if (options_.buddy_distance > 0 && transport_->size() > 1) {
    const int owner = ReplicatedRank(transport_->rank(), transport_->size());
    servers_.emplace_back([this, owner] { ServeReplica(owner); });
  }
}

void PsEngine::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  for (std::thread& t : servers_) t.join();
  servers_.clear();
}

int PsEngine::ReplicatedRank(int rank, int size) const {
  return ((rank - options_.buddy_distance) % size + size) % size;
}

bool PsEngine::stopping() const {
  return stop_.load(std::memory_order_relaxed);
}

absl::Status PsEngine::Stopped() const {
  return absl::FailedPreconditionError(
      absl::StrCat(options_.self, " is stopping"));
}

namespace {

// Every run this engine is handed was made by its CreateRun.
const PsRun& AsPs(const Run& run) { return static_cast<const PsRun&>(run); }

}  // namespace

// --- The run ----------------------------------------------------------------

absl::StatusOr<std::shared_ptr<Run>> PsEngine::CreateRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options) {
  auto run = std::make_shared<PsRun>();
  STARLING_RETURN_IF_ERROR(InitRun(tensors, options, run.get()));
  STARLING_RETURN_IF_ERROR(
      AddOptimizer(options, run->store->shard_elements(), run.get()));
  const int size = options.ranks;
  const int d = options_.buddy_distance;
  if (d > 0 && size > 1) {
    run->buddy = (options.rank + d) % size;
    auto replica = std::make_unique<OwnerReplica>();
    replica->of_rank = ReplicatedRank(options.rank, size);
    const collective::ShardLayout shards(run->layout.total_elements, size);
    replica->begin = shards.Begin(replica->of_rank);
    replica->elements = shards.Size(replica->of_rank);
    if (!options_.hogwild) {
      STARLING_ASSIGN_OR_RETURN(
          replica->optimizer,
          CreateRunOptimizer(options, replica->elements, run->total_workers));
    }
    {
      absl::MutexLock lock(&replica->mu);
      replica->parameters.assign(replica->elements, 0.0f);
    }
    run->replica = std::move(replica);
  }
  metrics_->shard_bytes->Set(static_cast<double>(run->store->ShardBytes()));
  metrics_->replica_of_rank->Set(run->replica != nullptr ? run->replica->of_rank
                                                         : -1);
  if (run->replica != nullptr) {
    metrics_->replica_bytes->Set(
        static_cast<double>(run->replica->elements * sizeof(float) +
                            (run->replica->optimizer != nullptr
                                 ? run->replica->optimizer->StateBytes()
                                 : 0)));
  }
  return run;
}

void PsEngine::ParametersReady(Run& base) {
  PsRun& run = static_cast<PsRun&>(base);
  if (run.replica == nullptr) return;
  OwnerReplica& replica = *run.replica;
  const absl::Span<const float> params = run.store->parameters();
  absl::MutexLock lock(&replica.mu);
  std::memcpy(replica.parameters.data(), params.data() + replica.begin,
              replica.elements * sizeof(float));
  replica.ready = true;
}

std::vector<std::pair<uint64_t, uint64_t>> PsEngine::OwnedRanges(
    const Run& run) const {
  return {{run.store->shard_begin(), run.store->shard_end()}};
}

std::string PsEngine::DescribeRun(const Run& run) const {
  return absl::StrCat("one flat shard per daemon (",
                      run.store->shard_elements(),
                      " here), float32 on the "
                      "wire");
}

void PsEngine::RunBegan(const std::shared_ptr<Run>& run) {
  absl::MutexLock lock(&mu_);
  run_ = std::static_pointer_cast<PsRun>(run);
  run_changed_.SignalAll();
}

void PsEngine::RunEnded(const Run& run) {
  absl::MutexLock lock(&mu_);
  if (run_.get() == &run) run_.reset();
  run_changed_.SignalAll();
}

int64_t PsEngine::Steps(const Run& run) const {
  return LocalUpdates(AsPs(run));
}

absl::Status PsEngine::PushRound(std::vector<Round>&, Run&, bool*) {
  return absl::InternalError(
      absl::StrCat("a round of pushes on ", options_.self,
                   ", whose shard owners apply each push at once"));
}

absl::StatusOr<std::shared_ptr<PsRun>> PsEngine::RunOf(
    const WorkerHandle& worker) {
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<Run> run, runs_->RunOf(worker));
  return std::static_pointer_cast<PsRun>(std::move(run));
}

// --- The shard --------------------------------------------------------------

// Once stopping, nothing changes the shard: a continuation may take it.
absl::Status PsEngine::ApplyLocal(PsRun& run, absl::Span<const float> grads,
                                  int64_t* update) {
  if (options_.hogwild) {
    if (stopping()) return Stopped();
    STARLING_RETURN_IF_ERROR(
        shard::AddRelaxed(run.store->shard_parameters(), grads));
    absl::MutexLock lock(&run.mu);  // the count only
    *update = ++run.updates;
    return absl::OkStatus();
  }
  absl::MutexLock lock(&run.mu);
  if (stopping()) return Stopped();
  STARLING_RETURN_IF_ERROR(run.optimizer->Apply(run.store->shard_parameters(),
                                                grads, run.updates + 1));
  *update = ++run.updates;
  return absl::OkStatus();
}

void PsEngine::CopyLocal(PsRun& run, absl::Span<float> out) {
  if (options_.hogwild) {
    shard::CopyRelaxed(run.store->shard_parameters(), out);
    return;
  }
  absl::MutexLock lock(&run.mu);
  const absl::Span<const float> shard = run.store->shard_parameters();
  std::memcpy(out.data(), shard.data(), shard.size() * sizeof(float));
}

absl::StatusOr<transport::WriteNotice> PsEngine::AwaitWrite(
    const transport::WriteMatch& match, absl::Time deadline) {
  while (true) {
    if (stopping()) return Stopped();
    absl::StatusOr<transport::WriteNotice> notice = transport_->WaitForWrite(
        match, std::min(deadline, absl::Now() + kWaitSlice));
    if (!absl::IsDeadlineExceeded(notice.status()) || absl::Now() >= deadline) {
      return notice;
    }
  }
}

absl::Status PsEngine::AwaitWrites(int peer, transport::Completion& done,
                                   absl::Time deadline) {
  return transport::AwaitWritesOrAbortPeer(
      *transport_, peer, done, deadline, [&] {
        return absl::DeadlineExceededError(absl::StrCat(
            "parameter-server writes to ", transport_->PeerName(peer),
            " not finished within ", absl::FormatDuration(options_.timeout)));
      });
}

absl::Status PsEngine::AwaitReply(int owner, uint32_t reply_tag,
                                  uint64_t request_id, uint32_t stage,
                                  absl::Span<float> values, absl::Time deadline,
                                  bool* answered) {
  *answered = false;
  while (true) {
    if (stopping()) return Stopped();
    absl::StatusOr<std::vector<std::byte>> got = transport_->RecvControl(
        owner, reply_tag, std::min(deadline, absl::Now() + kWaitSlice));
    if (absl::IsDeadlineExceeded(got.status())) {
      if (absl::Now() < deadline) continue;
      return absl::DeadlineExceededError(
          absl::StrCat("no answer to parameter-server request ", request_id,
                       " within ", absl::FormatDuration(options_.timeout)));
    }
    if (!got.ok()) return got.status();
    if (got->size() < kReplyHeaderBytes) {
      return absl::DataLossError(absl::StrCat(
          "parameter-server reply of ", got->size(), " bytes is too short"));
    }
    ReplyHeader header;
    std::memcpy(&header, got->data(), kReplyHeaderBytes);
    // A late reply to an earlier call (it timed out) is dropped here.
    if (header.request_id != request_id) continue;
    const std::byte* message = got->data() + kReplyHeaderBytes;
    // Values come with an Ok answer to what the caller waits for.
    const size_t values_bytes = header.code == 0 && header.stage == stage
                                    ? values.size() * sizeof(float)
                                    : 0;
    if (got->size() !=
            kReplyHeaderBytes + header.message_bytes + values_bytes ||
        header.code >
            static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
        (header.stage != kReady && header.stage != kDone) ||
        (header.stage == kReady && header.code != 0)) {
      return absl::DataLossError(absl::StrCat(
          "malformed parameter-server reply of ", got->size(), " bytes"));
    }
    *answered = true;
    if (header.code == 0 && header.stage != stage) {
      return absl::DataLossError(absl::StrCat(
          "parameter-server reply '", header.stage == kReady ? "ready" : "done",
          "' to request ", request_id, " out of turn"));
    }
    if (values_bytes > 0) {
      std::memcpy(values.data(), message + header.message_bytes, values_bytes);
    }
    return absl::Status(static_cast<absl::StatusCode>(header.code),
                        std::string(reinterpret_cast<const char*>(message),
                                    header.message_bytes));
  }
}

absl::Status PsEngine::Move(
    const WorkerHandle& worker, PsRun& run, uint32_t kind,
    const google::protobuf::RepeatedPtrField<proto::PoolSlice>& slices) {
  const TensorLayout& layout = run.layout;
  // Each slice's entry and the worker's buffer (of the tensor's type: the
  // parameter-server wire is float32, 16-bit tensors are widened and
  // narrowed here).
  struct Buffer {
    const TensorLayout::Entry* entry;
    absl::Span<std::byte> bytes;
  };
  std::vector<Buffer> buffers;
  for (const proto::PoolSlice& slice : slices) {
    STARLING_ASSIGN_OR_RETURN(const TensorLayout::Entry* entry,
                              layout.Find(slice.tensor()));
    if (slice.elements() != entry->elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", slice.tensor(), "': ", slice.elements(),
                       " elements ", kind == kPush ? "pushed, " : "asked, ",
                       entry->elements, " declared"));
    }
    STARLING_ASSIGN_OR_RETURN(
        absl::Span<std::byte> buffer,
        worker.pool->Bytes(slice, DataTypeBytes(entry->type)));
    buffers.push_back(Buffer{entry, buffer});
  }
  // Tensors a push leaves out count as zeros.
  std::vector<float> flat(layout.total_elements, 0.0f);
  if (kind == kPush) {
    for (const Buffer& b : buffers) {
      collective::ToFloat32(b.entry->type, b.bytes.data(),
                            flat.data() + b.entry->offset, b.entry->elements);
    }
  }
  if (absl::Status exchanged =
          Exchange(worker, run, kind, absl::MakeSpan(flat));
      !exchanged.ok()) {
    OnExchangeFailed(run, exchanged);
    return exchanged;
  }
  if (kind == kPull) {
    for (const Buffer& b : buffers) {
      collective::FromFloat32(b.entry->type, flat.data() + b.entry->offset,
                              b.bytes.data(), b.entry->elements);
    }
  }
  return absl::OkStatus();
}

// Sends every remote owner its request first, then applies (or reads) the
// own shard, then goes through the owners in rank order: a push writes its
// part as soon as that owner is ready and then collects the "done"s; a pull
// waits for each owner's reply (and write). The owners work in parallel.
// Rank order keeps pushes free of deadlock: an owner waiting for a push's
// gradient waits on a requester that waits on an owner of lower rank, so
// the lowest such owner's requester always goes on.
// Every write posted is over before this returns (`flat` is the source or
// the target).
// One Exchange in progress: which owners get a request and how each part
// travels, the request, the pull's receive region, the writes in flight and
// the first error.
struct PsEngine::Exchanging {
  Exchanging(uint32_t kind, absl::Span<float> flat, int rank, int size)
      : kind(kind),
        flat(flat),
        rank(rank),
        shards(flat.size(), size),
        remote(size, false),
        inline_part(size, false),
        sent(size, false),
        gradient_sent(size, false),
        writes(size),
        write_deadlines(size) {}

  // Owner `owner`'s part of the worker's vector.
  absl::Span<float> part(int owner) const {
    return flat.subspan(shards.Begin(owner), shards.Size(owner));
  }
  size_t part_bytes(int owner) const {
    return shards.Size(owner) * sizeof(float);
  }
  // Keeps the first error, naming its owner.
  void Failed(const transport::Transport& transport, int owner,
              const absl::Status& status) {
    if (status.ok() || !first_error.ok()) return;
    first_error = Annotate(
        status, absl::StrCat("shard owner ", transport.PeerName(owner)));
  }

  const uint32_t kind;
  const absl::Span<float> flat;
  const int rank;
  const collective::ShardLayout shards;
  // Owners with a part, other than this daemon; parts small enough to
  // travel inside the control messages.
  std::vector<bool> remote, inline_part;
  bool any_region = false;
  PsRequest request;
  uint32_t imm = 0;
  absl::Time deadline;
  transport::RegionId region = 0;
  // Requests sent; push gradients written (answered "ready").
  std::vector<bool> sent, gradient_sent;
  // Writes to each owner, each bounded from when it was posted.
  std::vector<std::unique_ptr<transport::Completion>> writes;
  std::vector<absl::Time> write_deadlines;
  absl::Status first_error;
};

absl::Status PsEngine::Exchange(const WorkerHandle& worker, PsRun& run,
                                uint32_t kind, absl::Span<float> flat) {
  if (stopping()) return Stopped();
  Exchanging x(kind, flat, transport_->rank(), transport_->size());
  STARLING_RETURN_IF_ERROR(PlanExchange(worker, run, x));
  SendRequests(x);
  if (kind == kPush) {
    int64_t update = 0;
    absl::Status applied = ApplyLocal(run, x.part(x.rank), &update);
    if (applied.ok()) {
      applied = Replicate(run, update, x.part(x.rank),
                          WorkerReplicaTag(worker.index));
    }
    x.Failed(*transport_, x.rank, applied);
  } else {
    CopyLocal(run, x.part(x.rank));
  }
  AwaitAnswers(x);
  // The owners' "done" for the gradients written, then the writes' ends.
  for (int owner = 0; owner < transport_->size(); ++owner) {
    if (!x.gradient_sent[owner]) continue;
    bool answered = false;
    x.Failed(*transport_, owner,
             AwaitReply(owner, x.request.reply_tag, x.request.request_id, kDone,
                        absl::Span<float>(), x.deadline, &answered));
  }
  for (int owner = 0; owner < transport_->size(); ++owner) {
    if (x.writes[owner] == nullptr) continue;
    x.Failed(*transport_, owner,
             AwaitWrites(owner, *x.writes[owner], x.write_deadlines[owner]));
  }
  if (x.any_region && kind == kPull) {
    // Retired first, so that an owner's late write is dropped, not held.
    transport_->RetireRegions(x.region, x.region + 1);
    // Cannot be NotFound: registered above, and only this call deregisters.
    transport_->DeregisterRegion(x.region).IgnoreError();
  }
  return x.first_error;
}

absl::Status PsEngine::PlanExchange(const WorkerHandle& worker, PsRun& run,
                                    Exchanging& x) {
  const size_t eager_bytes =
      std::min(options_.eager_bytes, transport_->max_control_bytes() -
                                         kRequestBytes - kReplyHeaderBytes);
  for (int owner = 0; owner < transport_->size(); ++owner) {
    x.remote[owner] = owner != x.rank && x.shards.Size(owner) > 0;
    x.inline_part[owner] = x.part_bytes(owner) <= eager_bytes;
    x.any_region |= x.remote[owner] && !x.inline_part[owner];
  }
  x.request.kind = x.kind;
  x.request.reply_tag = kPsReplyTagBase + worker.index;
  x.request.request_id =
      next_request_id_.fetch_add(1, std::memory_order_relaxed);
  x.request.run_id = run.id;
  x.imm = static_cast<uint32_t>(x.request.request_id);
  x.deadline = absl::Now() + options_.timeout;
  if (x.any_region && x.kind == kPush) {
    x.region = PushRegionId(
        x.rank, next_push_region_.fetch_add(1, std::memory_order_relaxed));
  } else if (x.any_region) {
    x.region =
        PullRegionId(next_pull_region_.fetch_add(1, std::memory_order_relaxed));
    absl::Status registered =
        transport_->RegisterRegion(x.region, AsBytes(x.flat));
    if (!registered.ok()) {
      transport_->RetireRegions(x.region, x.region + 1);
      return Annotate(registered, "registering the pull's receive buffer");
    }
  }
  return absl::OkStatus();
}

void PsEngine::SendRequests(Exchanging& x) {
  for (int owner = 0; owner < transport_->size(); ++owner) {
    if (!x.remote[owner]) continue;
    PsRequest& request = x.request;
    request.region = x.inline_part[owner] ? 0 : x.region;
    request.offset_bytes = x.kind == kPull && !x.inline_part[owner]
                               ? x.shards.Begin(owner) * sizeof(float)
                               : 0;
    request.part_bytes = x.part_bytes(owner);
    const size_t values_bytes =
        x.kind == kPush && x.inline_part[owner] ? request.part_bytes : 0;
    std::vector<std::byte> message(kRequestBytes + values_bytes);
    std::memcpy(message.data(), &request, kRequestBytes);
    if (values_bytes > 0) {
      std::memcpy(message.data() + kRequestBytes, x.part(owner).data(),
                  values_bytes);
    }
    absl::Status status =
        transport_->SendControl(owner, kPsRequestTag, message);
    x.Failed(*transport_, owner, status);
    x.sent[owner] = status.ok();
  }
}

void PsEngine::AwaitAnswers(Exchanging& x) {
  for (int owner = 0; owner < transport_->size(); ++owner) {
    if (!x.sent[owner]) continue;
    const bool by_write = !x.inline_part[owner];
    bool answered = false;
    absl::Status status = AwaitReply(
        owner, x.request.reply_tag, x.request.request_id,
        x.kind == kPush && by_write ? kReady : kDone,
        x.kind == kPull && !by_write ? x.part(owner) : absl::Span<float>(),
        x.deadline, &answered);
    if (x.kind == kPush && by_write && (status.ok() || !answered)) {
      // Ready: the gradient. No answer: 0 bytes, telling the owner (once it
      // gets to this request) that nobody waits for it any more.
      x.writes[owner] = std::make_unique<transport::Completion>();
      x.write_deadlines[owner] = absl::Now() + options_.timeout;
      const absl::Span<float> gradient =
          status.ok() ? x.part(owner) : absl::Span<float>();
      transport_->Write(owner, AsBytes(gradient), x.region, 0, x.imm,
                        x.writes[owner].get());
      x.gradient_sent[owner] = status.ok();
    } else if (x.kind == kPull && by_write && status.ok()) {
      status = AwaitPulledPart(x, owner);
    }
    x.Failed(*transport_, owner, status);
  }
}

absl::Status PsEngine::AwaitPulledPart(const Exchanging& x, int owner) {
  transport::WriteMatch match;
  match.region = x.region;
  match.peer = owner;
  absl::StatusOr<transport::WriteNotice> notice = AwaitWrite(match, x.deadline);
  if (!notice.ok()) return notice.status();
  if (notice->offset_bytes != x.shards.Begin(owner) * sizeof(float) ||
      notice->length_bytes != x.part_bytes(owner) || notice->imm != x.imm) {
    return absl::DataLossError(absl::StrCat(
        "pull ", x.request.request_id, ": ", notice->length_bytes,
        " bytes landed at offset ", notice->offset_bytes, " with immediate ",
        notice->imm, ", not the owner's part"));
  }
  return absl::OkStatus();
}

void PsEngine::OnExchangeFailed(PsRun& run, const absl::Status& status) {
  // FailedPrecondition: an owner ended the run. Anything else is this
  // request's own fault: the run goes on.
  if (!IsPeerLoss(status) && !absl::IsFailedPrecondition(status)) return;
  if (stopping()) return;  // the plane stops the run itself
  runs_->FailRun(run.id,
                 absl::AbortedError(absl::StrCat(
                     "a shard owner of run ", run.id, " on ", options_.self,
                     " did not answer: ", status.message())));
}

void PsEngine::Push(const WorkerHandle& worker,
                    const proto::WorkerRequest& request) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<PsRun>> run = RunOf(worker);
  absl::Status status =
      run.ok() ? Move(worker, **run, kPush, request.push_gradients().slices())
               : run.status();
  const proto::PushGradientsRequest& push = request.push_gradients();
  if (run.ok()) metrics_->progress->Record(worker.index, push);
  if (run.ok() && push.step_seconds() > 0) {
    // The worker's ReportStepTimes, as the sync engine records them.
    metrics_->worker_compute_seconds->Increment(push.compute_seconds());
    metrics_->worker_step_seconds->Increment(push.step_seconds());
    metrics_->compute_ratio->Set(
        (*run)->AddStepTimes(push.compute_seconds(), push.step_seconds()));
  }
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
  absl::StatusOr<std::shared_ptr<PsRun>> run = RunOf(worker);
  absl::Status status = run.status();
  const int64_t version = request.pull_parameters().version();
  if (status.ok() && options_.round_robin && version > 0) {
    status = AwaitTurn(worker, **run, version);
  }
  if (status.ok()) {
    status = Move(worker, **run, kPull, request.pull_parameters().slices());
  }
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
