#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/node/ps/ps_engine.h"
#include "server/node/ps/ps_wire.h"
#include "server/shard/optimizer/easgd.h"

// PsEngine's replicas (ps_run.h): the owner sends each update it applied to
// its buddy and waits for it there; the buddy's replica thread applies the
// updates in the owner's order.
namespace starling {
namespace node {
namespace {

// Updates a buddy holds back waiting for an earlier one (the owner has at
// most one in flight per thread: peers plus local workers).
constexpr size_t kMaxPendingUpdates = 4096;

}  // namespace

uint32_t PsEngine::ServerReplicaTag(int peer) const {
  return kPsReplicaReplyTagBase + static_cast<uint32_t>(peer);
}

uint32_t PsEngine::WorkerReplicaTag(int worker) const {
  return kPsReplicaReplyTagBase + static_cast<uint32_t>(transport_->size()) +
         static_cast<uint32_t>(worker);
}

// Owner side. The update travels in parts that fit control messages, in
// order, on one thread; the buddy answers once it applied the update.
absl::Status PsEngine::Replicate(PsRun& run, int64_t update,
                                 absl::Span<const float> grads,
                                 uint32_t reply_tag) {
  if (run.buddy < 0) return absl::OkStatus();
  const int buddy = run.buddy;
  const absl::Time start = absl::Now();
  const std::string what =
      absl::StrCat("update ", update, " of the shard of ", options_.self,
                   " replicated to its buddy ", transport_->PeerName(buddy));
  PsRequest request;
  request.kind = kReplicate;
  request.reply_tag = reply_tag;
  request.request_id = next_request_id_.fetch_add(1, std::memory_order_relaxed);
  request.run_id = run.id;
  request.region = static_cast<uint64_t>(update);
  const size_t room = (transport_->max_control_bytes() - kRequestBytes) /
                      sizeof(float) * sizeof(float);
  const size_t total = grads.size() * sizeof(float);
  const auto* bytes = reinterpret_cast<const std::byte*>(grads.data());
  // One message buffer for every piece (the last may be shorter).
  std::vector<std::byte> message(kRequestBytes + std::min(room, total));
  size_t offset = 0;
  do {
    const size_t part = std::min(room, total - offset);
    request.offset_bytes = offset;
    request.part_bytes = part;
    std::memcpy(message.data(), &request, kRequestBytes);
    if (part > 0) {
      std::memcpy(message.data() + kRequestBytes, bytes + offset, part);
    }
    STARLING_RETURN_IF_ERROR(Annotate(
        transport_->SendControl(
            buddy, kPsReplicaTag,
            absl::MakeConstSpan(message).subspan(0, kRequestBytes + part)),
        what));
    offset += part;
  } while (offset < total);
  bool answered = false;
  STARLING_RETURN_IF_ERROR(
      Annotate(AwaitReply(buddy, reply_tag, request.request_id, kDone,
                          absl::Span<float>(), absl::Now() + options_.timeout,
                          &answered),
               what));
  metrics_->replicated_bytes->Increment(static_cast<double>(total));
  metrics_->replication_seconds->Increment(
      absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

// Buddy side.

void PsEngine::ApplyNext(OwnerReplica& replica, absl::Span<const float> grads,
                         uint64_t request_id, uint32_t reply_tag,
                         std::vector<ReplicaAnswer>* answers) {
  const absl::Span<float> params = absl::MakeSpan(replica.parameters);
  absl::Status applied =
      replica.optimizer == nullptr
          ? shard::AddRelaxed(params, grads)
          : replica.optimizer->Apply(params, grads, replica.updates + 1);
  // Counted even if it failed (the owner applied it): the next ones keep
  // their order; the error goes to the owner.
  ++replica.updates;
  answers->push_back({request_id, reply_tag, std::move(applied)});
}

void PsEngine::ServeReplica(int owner) {
  while (std::optional<Received> got =
             NextRequest(owner, kPsReplicaTag, "replica")) {
    const PsRequest& request = got->request;
    absl::Status status = got->status;
    const absl::Span<const std::byte> body = got->body();
    std::vector<ReplicaAnswer> answers;
    if (status.ok()) {
      absl::StatusOr<std::shared_ptr<PsRun>> run = AwaitRun(request.run_id);
      if (!run.ok()) {
        status = run.status();
      } else if (request.kind != kReplicate) {
        status = absl::DataLossError(absl::StrCat(
            "parameter-server request of kind ", request.kind,
            " on the replica channel from ", transport_->PeerName(owner)));
      } else {
        status = TakeReplicated(owner, request, body, **run, &answers);
      }
    }
    if (!status.ok()) {
      answers.push_back({request.request_id, request.reply_tag, status});
    }
    for (const ReplicaAnswer& answer : answers) {
      if (answer.reply_tag == 0) continue;  // nowhere to answer
      absl::Status sent = SendReply(owner, answer.reply_tag, answer.request_id,
                                    kDone, answer.status);
      if (!sent.ok()) {
        STARLING_LOG(WARNING) << "replica reply to "
                              << transport_->PeerName(owner) << ": " << sent;
      }
    }
  }
}

absl::Status PsEngine::TakeReplicated(int owner, const PsRequest& request,
                                      absl::Span<const std::byte> values,
                                      PsRun& run,
                                      std::vector<ReplicaAnswer>* answers) {
  if (run.replica == nullptr || run.replica->of_rank != owner) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.self, " keeps no replica of the shard of ",
                     transport_->PeerName(owner), " in run ", run.id));
  }
  OwnerReplica& replica = *run.replica;
  const size_t total = replica.elements * sizeof(float);
  const int64_t update = static_cast<int64_t>(request.region);
  absl::MutexLock lock(&replica.mu);
  // The initial parameters first (the owner's daemon may have had them an
  // instant earlier), bounded.
  const absl::Time deadline = absl::Now() + options_.timeout;
  while (!replica.ready && !stopping() && absl::Now() < deadline) {
    replica.mu.AwaitWithDeadline(absl::Condition(&replica.ready),
                                 std::min(deadline, absl::Now() + kWaitSlice));
  }
  if (!replica.ready) {
    return absl::UnavailableError(
        absl::StrCat("the replica on ", options_.self, " of run ", run.id,
                     " has no initial parameters yet"));
  }
  if (update <= replica.updates) {
    return absl::DataLossError(absl::StrCat(
        "update ", update, " of the shard of ", transport_->PeerName(owner),
        " again: ", options_.self, "'s replica holds ", replica.updates));
  }
  auto it = replica.pending.find(update);
  if (it == replica.pending.end() && update == replica.updates + 1 &&
      request.offset_bytes == 0 && request.part_bytes == total &&
      values.size() == total) {
    // The usual case: a whole update, next in line. Applied from a buffer
    // kept for it, with no update held back.
    replica.next.resize(replica.elements);
    if (total > 0) std::memcpy(replica.next.data(), values.data(), total);
    ApplyNext(replica, replica.next, request.request_id, request.reply_tag,
              answers);
  } else if (it == replica.pending.end()) {
    if (replica.pending.size() >= kMaxPendingUpdates) {
      return absl::ResourceExhaustedError(
          absl::StrCat(options_.self, " holds ", replica.pending.size(),
                       " updates of the shard of ", transport_->PeerName(owner),
                       " waiting for update ", replica.updates + 1));
    }
    it = replica.pending.emplace(update, OwnerReplica::Pending()).first;
    it->second.values.resize(replica.elements);
    it->second.request_id = request.request_id;
    it->second.reply_tag = request.reply_tag;
  }
  if (it != replica.pending.end()) {
    OwnerReplica::Pending& pending = it->second;
    if (pending.request_id != request.request_id ||
        request.offset_bytes != pending.received_bytes ||
        request.part_bytes != values.size() ||
        request.offset_bytes + request.part_bytes > total) {
      replica.pending.erase(it);
      return absl::DataLossError(absl::StrCat(
          "replicated update ", update, " from ", transport_->PeerName(owner),
          ": ", values.size(), " bytes at offset ", request.offset_bytes,
          " of request ", request.request_id, "; the shard holds ", total,
          " bytes"));
    }
    if (!values.empty()) {
      std::memcpy(reinterpret_cast<std::byte*>(pending.values.data()) +
                      request.offset_bytes,
                  values.data(), values.size());
    }
    pending.received_bytes += values.size();
  }
  // Every whole update next in line, in the owner's order.
  while (!replica.pending.empty()) {
    auto next = replica.pending.begin();
    if (next->first != replica.updates + 1 ||
        next->second.received_bytes != total) {
      break;
    }
    ApplyNext(replica, next->second.values, next->second.request_id,
              next->second.reply_tag, answers);
    replica.pending.erase(next);
  }
  return absl::OkStatus();
}

}  // namespace node
}  // namespace starling
