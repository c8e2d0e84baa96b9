#include "server/transport/shm/shm_link.h"

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "server/transport/frame.h"

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
  if (records) return WriteRecords(iov, count);
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
  if (records) return ReadRecords(iov, count);
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

absl::StatusOr<size_t> RingLink::WriteRecords(const struct iovec* iov,
                                              int count) {
  // FrameSender hands over the stream from the first byte not yet reported
  // taken (`reported`); bytes up to `written` are in the ring already.
  const uint64_t done = out->refs_done.load(std::memory_order_acquire);
  while (!refs.empty() && refs.front().seq <= done) refs.pop_front();
  // Acquire: the reader's probe of this process happened before.
  const bool by_reference =
      out->reads_sender.load(std::memory_order_acquire) != 0;
  uint64_t pos = reported;
  int i = 0;
  size_t at = 0;  // bytes of iov[i] before `pos`
  while (i < count && pos < written) {
    const size_t n = std::min<uint64_t>(iov[i].iov_len - at, written - pos);
    pos += n;
    at += n;
    if (at == iov[i].iov_len) {
      ++i;
      at = 0;
    }
  }
  if (pos < written) {
    return absl::InternalError(absl::StrCat(
        "shared memory to ", name, ": the sender offered ", pos - reported,
        " bytes, fewer than the ", written - reported, " already in the ring"));
  }
  auto room = [&] {
    return out_capacity - (out->head.load(std::memory_order_relaxed) -
                           out->tail.load(std::memory_order_acquire));
  };
  auto is_reference = [&](int k, size_t from) {
    return by_reference && iov[k].iov_len - from >= kReferenceBytes;
  };
  bool wrote = false;
  while (i < count) {
    if (at == iov[i].iov_len) {
      ++i;
      at = 0;
      continue;
    }
    if (is_reference(i, at)) {
      if (room() < sizeof(RingRecord)) break;
      RingRecord record;
      record.kind = RingRecord::kReference;
      record.length = iov[i].iov_len - at;
      record.address = reinterpret_cast<uint64_t>(
          static_cast<const char*>(iov[i].iov_base) + at);
      struct iovec header = {&record, sizeof(record)};
      RingWrite(out, out_data, out_capacity, &header, 1);
      wrote = true;
      refs.push_back({pos, ++refs_sent});
      pos += record.length;
      ++i;
      at = 0;
      continue;
    }
    // One inline record: the pieces up to the next reference, or what fits.
    uint64_t total = iov[i].iov_len - at;
    int end = i + 1;
    while (end < count && !is_reference(end, 0)) total += iov[end++].iov_len;
    const uint64_t free = room();
    if (free <= sizeof(RingRecord)) break;
    const uint64_t take = std::min<uint64_t>(total, free - sizeof(RingRecord));
    RingRecord record;
    record.kind = RingRecord::kInline;
    record.length = take;
    absl::InlinedVector<struct iovec, 8> parts;
    parts.push_back({&record, sizeof(record)});
    uint64_t left = take;
    while (left > 0) {
      const size_t n = std::min<uint64_t>(iov[i].iov_len - at, left);
      if (n > 0) {
        parts.push_back({static_cast<char*>(iov[i].iov_base) + at, n});
      }
      left -= n;
      at += n;
      if (at == iov[i].iov_len) {
        ++i;
        at = 0;
      }
    }
    RingWrite(out, out_data, out_capacity, parts.data(),
              static_cast<int>(parts.size()));
    wrote = true;
    pos += take;
    if (take < total) break;
  }
  written = pos;
  if (wrote) DoorbellRing(peer_bell);
  // Taken: up to the first reference the reader has not copied yet.
  const uint64_t limit = refs.empty() ? written : refs.front().start;
  const size_t taken = limit - reported;
  reported = limit;
  return taken;
}

absl::StatusOr<size_t> RingLink::ReadRecords(const struct iovec* iov,
                                             int count) {
  size_t copied = 0;
  bool moved = false;  // the tail moved: a waiting writer has room
  int i = 0;
  size_t at = 0;  // bytes of iov[i] filled
  while (i < count) {
    if (at == iov[i].iov_len) {
      ++i;
      at = 0;
      continue;
    }
    if (rec_left == 0) {
      const uint64_t available = in->head.load(std::memory_order_acquire) -
                                 in->tail.load(std::memory_order_relaxed);
      if (available < sizeof(RingRecord)) break;
      RingRecord record;
      struct iovec header = {&record, sizeof(record)};
      RingRead(in, in_data, in_capacity, &header, 1);
      moved = true;
      if (record.kind != RingRecord::kInline &&
          record.kind != RingRecord::kReference) {
        return absl::DataLossError(
            absl::StrCat(name, " wrote a shared-memory record of kind ",
                         record.kind, ", neither inline nor reference"));
      }
      rec_kind = record.kind;
      rec_left = record.length;
      rec_address = record.address;
      continue;
    }
    char* dst = static_cast<char*>(iov[i].iov_base) + at;
    const size_t want = std::min<uint64_t>(iov[i].iov_len - at, rec_left);
    size_t n = 0;
    if (rec_kind == RingRecord::kInline) {
      // An inline record's bytes were published with its header.
      struct iovec to = {dst, want};
      n = RingRead(in, in_data, in_capacity, &to, 1);
      if (n == 0) break;
      moved = true;
    } else {
      struct iovec to = {dst, want};
      struct iovec from = {reinterpret_cast<void*>(rec_address), want};
      const ssize_t got = process_vm_readv(pid, &to, 1, &from, 1, 0);
      if (got <= 0) {
        return absl::UnavailableError(
            absl::StrCat("reading ", name, "'s write of ", rec_left,
                         " bytes from its memory", " (pid ", pid,
                         "): ", got < 0 ? std::strerror(errno) : "nothing"));
      }
      n = static_cast<size_t>(got);
      rec_address += n;
    }
    copied += n;
    at += n;
    rec_left -= n;
    if (rec_left == 0 && rec_kind == RingRecord::kReference) {
      // Release: the bytes are in place before the writer reuses them.
      in->refs_done.fetch_add(1, std::memory_order_release);
      DoorbellRing(peer_bell);
    }
  }
  if (copied == 0 && rec_left == 0 &&
      in->closed.load(std::memory_order_acquire) != 0 &&
      in->head.load(std::memory_order_acquire) ==
          in->tail.load(std::memory_order_relaxed)) {
    return absl::UnavailableError(absl::StrCat(name, " closed the connection"));
  }
  if (moved && in->sender_waiting.load(std::memory_order_seq_cst) != 0) {
    DoorbellRing(peer_bell);
  }
  return copied;
}

absl::Status RingLink::PostWrite(absl::Span<const std::byte> data,
                                 uint64_t remote, uint64_t offset, uint32_t imm,
                                 Completion* done) {
  const FrameHeader header =
      WriteFrameHeader(remote, offset, data.size(), imm,
                       next_seq.fetch_add(1, std::memory_order_relaxed));
  return sender->PostWrite(header, data.data(), done);
}

absl::Status RingLink::PostControlThenWrite(const FrameHeader& control,
                                            std::vector<std::byte> message,
                                            absl::Span<const std::byte> data,
                                            uint64_t remote, uint64_t offset,
                                            uint32_t imm, Completion* done) {
  const FrameHeader header =
      WriteFrameHeader(remote, offset, data.size(), imm,
                       next_seq.fetch_add(1, std::memory_order_relaxed));
  return sender->PostFrameThenWrite(control, std::move(message), header,
                                    data.data(), done);
}

void DoorbellLoop(Doorbell* bell, const std::atomic<bool>& stopping,
                  int idle_polls, absl::Duration longest_sleep,
                  const std::function<void()>& each_turn,
                  const std::function<bool()>& poll) {
  int idle = 0;
  while (!stopping.load(std::memory_order_relaxed)) {
    each_turn();
    if (poll()) {
      idle = 0;
      continue;
    }
    if (++idle < idle_polls) {
      sched_yield();
      continue;
    }
    // Announce, read the bell, re-check, then wait for the bell to move
    // (DoorbellRing bumps it before it looks at `sleeping`).
    bell->sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t seen = bell->count.load(std::memory_order_seq_cst);
    if (!poll() && !stopping.load(std::memory_order_relaxed)) {
      DoorbellWait(bell, seen, longest_sleep);
    }
    bell->sleeping.store(0, std::memory_order_relaxed);
    idle = 0;
  }
}

bool CanReadProcess(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t value = 0;
  struct iovec to = {&value, sizeof(value)};
  struct iovec from = {reinterpret_cast<void*>(address), sizeof(value)};
  return process_vm_readv(pid, &to, 1, &from, 1, 0) ==
             static_cast<ssize_t>(sizeof(value)) &&
         value == expected;
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
