#include "server/transport/shm/shm_link.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace transport {
namespace shm {

void RingLink::Map(int me, ShmSegment* own,
                   std::unique_ptr<ShmSegment> peer_segment) {
  remote = std::move(peer_segment);
  pid = remote->header()->pid;
  out = remote->ring(me);
  out_data = remote->ring_data(me);
  out_capacity = remote->header()->ring_bytes;
  in = own->ring(peer);
  in_data = own->ring_data(peer);
  in_capacity = own->header()->ring_bytes;
  peer_bell = &remote->header()->doorbell;
  own_bell = &own->header()->doorbell;
  sender = std::make_unique<FrameSender>(this, &tracker);
  remote->header()->mapped_by[me].store(1, std::memory_order_release);
}

absl::StatusOr<size_t> RingLink::WriteSome(const struct iovec* iov, int count) {
  const size_t n = RingWrite(out, out_data, out_capacity, iov, count);
  if (n > 0) DoorbellRing(peer_bell);
  return n;
}

void RingLink::WantWritable(bool want) {
  want_flush.store(want, std::memory_order_relaxed);
  out->sender_waiting.store(want ? 1 : 0, std::memory_order_seq_cst);
  if (want) DoorbellRing(own_bell);
}

void RingLink::Shutdown(bool /*graceful*/) {
  if (!close_on_shutdown) return;
  out->closed.store(1, std::memory_order_release);
  DoorbellRing(peer_bell);
}

absl::StatusOr<size_t> RingLink::ReadSome(const struct iovec* iov, int count) {
  size_t n = RingRead(in, in_data, in_capacity, iov, count);
  if (n == 0 && in->closed.load(std::memory_order_acquire) != 0) {
    // Bytes written before `closed` are visible now; read them first.
    n = RingRead(in, in_data, in_capacity, iov, count);
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat(name, " closed the connection"));
    }
  }
  if (n > 0 && in->sender_waiting.load(std::memory_order_seq_cst) != 0) {
    DoorbellRing(peer_bell);
  }
  return n;
}

LinkService ServiceLink(
    RingLink* link, bool recheck,
    const std::function<void(const FrameReceiver::Result& result)>& fail) {
  LinkService service;
  if (link->dead.load(std::memory_order_acquire)) {
    link->receiver->Abandon();
    if (!link->eof) {
      char scratch[4096];
      struct iovec iov = {scratch, sizeof(scratch)};
      absl::StatusOr<size_t> got = link->ReadSome(&iov, 1);
      if (!got.ok()) {
        link->eof = true;
        service.eof = true;
      } else if (*got > 0) {
        service.progress = true;
      }
    }
    return service;
  }
  if (recheck) {
    link->receiver->RecheckLanding();
    if (link->receiver->paused()) {
      service.progress = true;
      FrameReceiver::Result result = link->receiver->Resume();
      if (!result.error.ok()) {
        fail(result);
        return service;
      }
    }
  }
  if (link->want_flush.load(std::memory_order_relaxed)) {
    const uint64_t before = link->out->head.load(std::memory_order_relaxed);
    absl::Status flushed = link->sender->Flush();
    if (!flushed.ok()) {
      FrameReceiver::Result result;
      result.error = flushed;
      fail(result);
      return service;
    }
    service.progress |=
        link->out->head.load(std::memory_order_relaxed) != before;
  }
  if (link->receiver->paused()) return service;
  const uint64_t before = link->in->tail.load(std::memory_order_relaxed);
  FrameReceiver::Result result = link->receiver->Receive(link);
  service.progress |= link->in->tail.load(std::memory_order_relaxed) != before;
  if (!result.error.ok()) {
    const bool closed = link->in->closed.load(std::memory_order_acquire) != 0 &&
                        absl::IsUnavailable(result.error) && !result.orderly;
    fail(result);
    link->receiver->Abandon();
    if (closed && !link->eof) {
      link->eof = true;
      service.eof = true;
    }
  }
  return service;
}

}  // namespace shm
}  // namespace transport
}  // namespace starling
