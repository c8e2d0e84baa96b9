#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/node/ps/ps_engine.h"
#include "server/node/ps/ps_wire.h"
#include "server/node/run/float_bytes.h"
#include "server/shard/optimizer/easgd.h"
#include "server/transport/await_writes.h"

// PsEngine's owner side (ps_engine.h): the server thread per peer, the run
// it serves, and the pushes and pulls it applies to this daemon's shard.
namespace starling {
namespace node {

absl::Status PsEngine::SendReply(int peer, uint32_t reply_tag,
                                 uint64_t request_id, uint32_t stage,
                                 const absl::Status& status,
                                 absl::Span<const float> values) {
  const size_t values_bytes = values.size() * sizeof(float);
  const size_t room =
      transport_->max_control_bytes() - kReplyHeaderBytes - values_bytes;
  const size_t message_bytes = std::min(status.message().size(), room);
  ReplyHeader header;
  header.code = static_cast<uint32_t>(status.code());
  header.message_bytes = static_cast<uint32_t>(message_bytes);
  header.request_id = request_id;
  header.stage = stage;
  std::vector<std::byte> reply(kReplyHeaderBytes + message_bytes +
                               values_bytes);
  std::memcpy(reply.data(), &header, kReplyHeaderBytes);
  std::memcpy(reply.data() + kReplyHeaderBytes, status.message().data(),
              message_bytes);
  if (values_bytes > 0) {
    std::memcpy(reply.data() + kReplyHeaderBytes + message_bytes, values.data(),
                values_bytes);
  }
  return transport_->SendControl(peer, reply_tag, reply);
}

// Owner side.

std::optional<PsEngine::Received> PsEngine::NextRequest(int peer, uint32_t tag,
                                                        const char* thread) {
  while (!stopping()) {
    absl::StatusOr<std::vector<std::byte>> got =
        transport_->RecvControl(peer, tag, absl::Now() + kWaitSlice);
    if (absl::IsDeadlineExceeded(got.status())) continue;
    if (!got.ok()) {
      STARLING_LOG(DEBUG) << thread << " thread for "
                          << transport_->PeerName(peer)
                          << " ends: " << got.status();
      return std::nullopt;
    }
    Received received;
    received.bytes = *std::move(got);
    received.status = DecodeRequest(received.bytes, &received.request);
    return received;
  }
  return std::nullopt;
}

void PsEngine::Serve(int peer) {
  // This peer's pushes land here, one at a time; its pulls are staged here.
  std::vector<float> buffer;
  while (std::optional<Received> got =
             NextRequest(peer, kPsRequestTag, "parameter-server")) {
    const PsRequest& request = got->request;
    absl::Status status = got->status;
    const absl::Span<const std::byte> body = got->body();
    const bool push_region = request.kind == kPush && request.region != 0;
    const bool own_push_region =
        push_region && PushRegionWriter(request.region) == peer;
    absl::Span<const float> values;  // an inline pull's answer
    if (status.ok()) {
      absl::StatusOr<std::shared_ptr<PsRun>> run = AwaitRun(request.run_id);
      if (!run.ok()) {
        status = run.status();
      } else if (push_region && !own_push_region) {
        status = absl::DataLossError(absl::StrCat(
            "push into region ", absl::StrFormat("0x%x", request.region),
            ", which is not one of ", transport_->PeerName(peer)));
      } else if (request.kind == kPush) {
        status = ServePush(peer, request, body, **run, buffer);
      } else if (request.kind == kPull && body.empty()) {
        status = ServePull(peer, request, **run, buffer, &values);
      } else if (request.kind == kUpdates && body.empty()) {
        // The count as two floats' worth of bytes (the reply's values).
        buffer.assign(sizeof(int64_t) / sizeof(float), 0.0f);
        const int64_t count = LocalUpdates(**run);
        std::memcpy(buffer.data(), &count, sizeof(count));
        values = buffer;
      } else {
        status = absl::DataLossError(
            absl::StrCat("parameter-server request of kind ", request.kind,
                         " with ", body.size(), " bytes of values"));
      }
    }
    // Whatever happened, this push's id is done: a write to it still coming
    // (or a requester's "gave up") is dropped, never held.
    if (own_push_region) {
      transport_->RetireRegions(request.region, request.region + 1);
    }
    if (request.reply_tag == 0) continue;  // nowhere to answer
    absl::Status sent =
        SendReply(peer, request.reply_tag, request.request_id, kDone, status,
                  status.ok() ? values : absl::Span<const float>());
    if (!sent.ok()) {
      STARLING_LOG(WARNING) << "parameter-server reply to "
                            << transport_->PeerName(peer) << ": " << sent;
    }
  }
}

absl::StatusOr<std::shared_ptr<PsRun>> PsEngine::AwaitRun(uint64_t run_id) {
  // The requester's daemon may have begun the run an instant before this
  // one (the coordinator answers every rank at once): wait for it here,
  // bounded, in slices so that Stop() is noticed.
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::MutexLock lock(&mu_);
  while ((run_ == nullptr || run_->id < run_id) && !stopping() &&
         absl::Now() < deadline) {
    run_changed_.WaitWithDeadline(&mu_,
                                  std::min(deadline, absl::Now() + kWaitSlice));
  }
  if (run_ == nullptr || run_->id != run_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run ", run_id, " is not running on ", options_.self,
        run_ == nullptr ? std::string(" (no run is)")
                        : absl::StrCat(" (run ", run_->id, " is)")));
  }
  return run_;
}

// The receive buffer is registered under the requester's id only between
// "ready" and the gradient's landing; the id is retired before the buffer
// is read, so nothing else lands in it while the optimizer reads it.
absl::Status PsEngine::ServePush(int peer, const PsRequest& request,
                                 absl::Span<const std::byte> gradient,
                                 PsRun& run, std::vector<float>& buffer) {
  const size_t shard_bytes = run.store->shard_elements() * sizeof(float);
  const bool inline_part = request.region == 0;
  if (request.part_bytes != shard_bytes || request.offset_bytes != 0 ||
      gradient.size() != (inline_part ? shard_bytes : 0)) {
    return absl::DataLossError(absl::StrCat(
        "push of ", request.part_bytes, " bytes at offset ",
        request.offset_bytes, " with ", gradient.size(),
        " bytes inline; the shard of ", options_.self, " holds ", shard_bytes));
  }
  buffer.resize(run.store->shard_elements());
  const auto apply = [&]() -> absl::Status {
    int64_t update = 0;
    STARLING_RETURN_IF_ERROR(ApplyLocal(run, buffer, &update));
    return Replicate(run, update, buffer, ServerReplicaTag(peer));
  };
  if (inline_part) {
    std::memcpy(buffer.data(), gradient.data(), shard_bytes);
    return apply();
  }
  STARLING_RETURN_IF_ERROR(transport_->RegisterRegion(
      request.region, AsBytes(absl::MakeSpan(buffer))));
  transport::WriteMatch match;
  match.region = request.region;
  match.peer = peer;
  const absl::Status ready = SendReply(
      peer, request.reply_tag, request.request_id, kReady, absl::OkStatus());
  absl::StatusOr<transport::WriteNotice> notice =
      ready.ok() ? AwaitWrite(match, absl::Now() + options_.timeout)
                 : absl::StatusOr<transport::WriteNotice>(ready);
  transport_->RetireRegions(request.region, request.region + 1);
  // Cannot be NotFound: registered above, and only this thread deregisters.
  transport_->DeregisterRegion(request.region).IgnoreError();
  if (!notice.ok()) {
    return Annotate(
        notice.status(),
        absl::StrCat("waiting for the gradient of push ", request.request_id,
                     " from ", transport_->PeerName(peer)));
  }
  if (notice->length_bytes == 0) {
    return absl::CancelledError(absl::StrCat(
        transport_->PeerName(peer), " gave up push ", request.request_id));
  }
  if (notice->offset_bytes != 0 || notice->length_bytes != shard_bytes ||
      notice->imm != static_cast<uint32_t>(request.request_id)) {
    return absl::DataLossError(absl::StrCat(
        "push ", request.request_id, " from ", transport_->PeerName(peer),
        " wrote ", notice->length_bytes, " bytes at offset ",
        notice->offset_bytes, " with immediate ", notice->imm, "; expected ",
        shard_bytes, " bytes at 0"));
  }
  return apply();
}

// The shard is copied out under `ps_mu` (a write's source must not change
// while it is sent, and no lock is held across the write).
absl::Status PsEngine::ServePull(int peer, const PsRequest& request, PsRun& run,
                                 std::vector<float>& buffer,
                                 absl::Span<const float>* values) {
  const size_t shard_bytes = run.store->shard_elements() * sizeof(float);
  const bool inline_part = request.region == 0;
  if (request.part_bytes != shard_bytes ||
      !(inline_part || IsPullRegionId(request.region))) {
    return absl::DataLossError(
        absl::StrCat("pull of ", request.part_bytes, " bytes into region ",
                     absl::StrFormat("0x%x", request.region), "; the shard of ",
                     options_.self, " holds ", shard_bytes));
  }
  if (inline_part &&
      kReplyHeaderBytes + shard_bytes > transport_->max_control_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inline pull of ", shard_bytes, " bytes; control messages hold ",
        transport_->max_control_bytes()));
  }
  buffer.resize(run.store->shard_elements());
  CopyLocal(run, absl::MakeSpan(buffer));
  if (inline_part) {
    *values = buffer;
    return absl::OkStatus();
  }
  transport::Completion done;
  transport_->Write(peer, AsBytes(absl::MakeSpan(buffer)), request.region,
                    request.offset_bytes,
                    static_cast<uint32_t>(request.request_id), &done);
  return AwaitWrites(peer, done, absl::Now() + options_.timeout);
}

// Requester side.

}  // namespace node
}  // namespace starling
