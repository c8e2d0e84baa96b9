#include "server/transport/inbox.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace {

// A deregistration waits for the I/O thread's landings to leave the region:
// it reports the wait every kPinReport and ends the process past kPinBound
// (the I/O thread stopped serving: a bug, and the memory cannot be freed
// safely).
constexpr absl::Duration kPinReport = absl::Seconds(5);
constexpr absl::Duration kPinBound = absl::Seconds(60);

uint64_t ControlKey(int peer, uint32_t tag) {
  return (static_cast<uint64_t>(peer) << 32) | tag;
}

std::string RegionName(RegionId id) { return absl::StrFormat("0x%x", id); }

}  // namespace

Inbox::Inbox(Options options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  peers_.resize(options_.size);
}

Inbox::~Inbox() = default;

absl::Status Inbox::RangeError(int peer, const Region& region, uint64_t offset,
                               uint64_t length) const {
  return absl::DataLossError(absl::StrCat(
      options_.name(peer), " wrote ", length, " bytes at offset ", offset,
      " into region ", RegionName(region.id), " of ", region.memory.size(),
      " bytes on ", options_.name(options_.rank),
      ": past the end of the region"));
}

absl::Status Inbox::RegisterRegion(RegionId id, absl::Span<std::byte> memory) {
  Region* region = nullptr;
  // The writes that came early and are complete, applied in arrival order
  // with no lock held (the I/O thread needs the lock for every frame);
  // pieces still being received are applied by EndWrite().
  std::vector<std::unique_ptr<EarlyPiece>> early;
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      return absl::FailedPreconditionError("transport is shutting down");
    }
    if (retired_.Contains(id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("region ", RegionName(id),
                       " was retired and cannot be registered again"));
    }
    auto [it, inserted] = regions_.try_emplace(id);
    if (!inserted) {
      return absl::AlreadyExistsError(
          absl::StrCat("region ", RegionName(id), " is already registered"));
    }
    it->second = std::make_unique<Region>();
    region = it->second.get();
    region->id = id;
    region->memory = memory;
    wake = std::exchange(writes_waiting_, false);
    auto held = early_.find(id);
    if (held != early_.end()) {
      std::vector<std::unique_ptr<EarlyPiece>> keep;
      for (auto& piece : held->second) {
        (piece->complete ? early : keep).push_back(std::move(piece));
      }
      held->second = std::move(keep);
      if (held->second.empty()) early_.erase(held);
    }
    if (!early.empty()) {
      // Until they are in, the region's notices wait with the early ones
      // (Publish), and a deregistration waits for this pin.
      region->applying_early = true;
      ++region->pins;
    }
  }
  std::vector<std::pair<int, absl::Status>> failed;
  size_t applied_bytes = 0;
  for (auto& piece : early) {
    absl::Status status = ApplyPiece(region, piece.get());
    applied_bytes += piece->data.size();
    if (!status.ok()) failed.emplace_back(piece->peer, std::move(status));
  }
  early.clear();
  {
    absl::MutexLock lock(&mu_);
    early_bytes_ -= applied_bytes;
    if (region->applying_early) {
      region->applying_early = false;
      Unpin(region);
    }
    auto deferred = deferred_notices_.find(id);
    if (deferred != deferred_notices_.end() && regions_.contains(id)) {
      auto& queue = notices_[id];
      for (const WriteNotice& notice : deferred->second) {
        bool bad = false;
        for (const auto& f : failed) bad |= f.first == notice.peer;
        if (!bad) queue.push_back(notice);
      }
      deferred_notices_.erase(deferred);
    }
    for (const auto& f : failed) {
      if (peers_[f.first].status.ok()) peers_[f.first].status = f.second;
    }
    Changed();
  }
  for (const auto& f : failed) {
    STARLING_LOG(ERROR) << f.second;
    if (options_.on_peer_error) options_.on_peer_error(f.first, f.second);
  }
  if (wake && options_.wake_io) options_.wake_io();
  return absl::OkStatus();
}

absl::Status Inbox::ApplyPiece(Region* region, EarlyPiece* piece) const {
  const uint64_t length = piece->data.size();
  if (piece->offset > region->memory.size() ||
      length > region->memory.size() - piece->offset) {
    return RangeError(piece->peer, *region, piece->offset, length);
  }
  if (length > 0) {
    std::memcpy(region->memory.data() + piece->offset, piece->data.data(),
                length);
  }
  return absl::OkStatus();
}

absl::Status Inbox::DeregisterRegion(RegionId id) {
  std::unique_ptr<Region> region;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(id);
    if (it == regions_.end()) {
      return absl::NotFoundError(
          absl::StrCat("region ", RegionName(id), " is not registered"));
    }
    region = std::move(it->second);
    regions_.erase(it);
    notices_.erase(id);
    // Release: the I/O thread's acquire load sees it before its next read.
    region->leaving.store(true, std::memory_order_release);
    if (region->pins == 0) return absl::OkStatus();
  }
  if (options_.wake_io) options_.wake_io();
  // The I/O thread diverts its landings as soon as it handles the wake-up
  // (it never blocks with one), and a registration applies its early
  // pieces from memory: the wait is short, and bounded against our own
  // bug. Returning before it ends would free memory still being written.
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  while (region->pins > 0) {
    const absl::Duration waited = absl::Now() - start;
    STARLING_CHECK(waited < kPinBound)
        << "region " << RegionName(id) << " still has " << region->pins
        << " landing(s) writing into it " << absl::FormatDuration(waited)
        << " after its deregistration began: the transport's I/O thread "
           "stopped serving";
    if (changed_.WaitWithTimeout(&mu_, kPinReport)) {
      STARLING_LOG(WARNING)
          << "deregistering region " << RegionName(id) << ": waiting "
          << absl::FormatDuration(absl::Now() - start) << " for "
          << region->pins << " landing(s) of the I/O thread to leave it";
    }
  }
  return absl::OkStatus();
}

bool Inbox::Stale(RegionId id) const {
  return !regions_.contains(id) && retired_.Contains(id);
}

void Inbox::RetireRegions(RegionId first, RegionId end) {
  {
    absl::MutexLock lock(&mu_);
    retired_.Add(first, end);
    // Held pieces go now, except those still being received: EndWrite()
    // drops them.
    for (auto it = early_.begin(); it != early_.end();) {
      if (!Stale(it->first)) {
        ++it;
        continue;
      }
      auto& pieces = it->second;
      std::vector<std::unique_ptr<EarlyPiece>> keep;
      for (auto& piece : pieces) {
        if (piece->complete) {
          early_bytes_ -= piece->data.size();
        } else {
          keep.push_back(std::move(piece));
        }
      }
      pieces = std::move(keep);
      if (pieces.empty()) {
        early_.erase(it++);
      } else {
        ++it;
      }
    }
    // Whole writes held: each had its notice deferred. Writes still missing
    // parts or earlier writes are counted when Publish() drops them.
    for (auto it = deferred_notices_.begin(); it != deferred_notices_.end();) {
      if (Stale(it->first)) {
        stale_writes_dropped_ += it->second.size();
        deferred_notices_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Paused connections may go on: their writes are dropped now, or fit.
  if (options_.wake_io) options_.wake_io();
}

uint64_t Inbox::stale_writes_dropped() const {
  absl::MutexLock lock(&mu_);
  return stale_writes_dropped_;
}

absl::Status Inbox::BeginWrite(int peer, const FrameHeader& header,
                               Landing* landing, bool* must_wait) {
  *must_wait = false;
  *landing = Landing();
  landing->header = header;
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(header.region);
  if (it != regions_.end()) {
    Region* region = it->second.get();
    if (header.offset > region->memory.size() ||
        header.length > region->memory.size() - header.offset) {
      absl::Status status =
          RangeError(peer, *region, header.offset, header.length);
      if (peers_[peer].status.ok()) peers_[peer].status = status;
      Changed();
      return status;
    }
    ++region->pins;
    landing->region = region;
    landing->dst = region->memory.data() + header.offset;
    return absl::OkStatus();
  }
  if (retired_.Contains(header.region)) {
    // A late write of a finished op: read past, never held (Publish()
    // counts it).
    landing->discarded = true;
    return absl::OkStatus();
  }
  if (header.length > options_.max_early_bytes - early_bytes_ ||
      early_bytes_ > options_.max_early_bytes) {
    *must_wait = true;
    writes_waiting_ = true;
    return absl::OkStatus();
  }
  auto piece = std::make_unique<EarlyPiece>();
  piece->peer = peer;
  piece->offset = header.offset;
  piece->data.resize(header.length);
  early_bytes_ += header.length;
  landing->piece = piece.get();
  landing->dst = piece->data.data();
  early_[header.region].push_back(std::move(piece));
  return absl::OkStatus();
}

bool Inbox::LandingValid(const Landing& landing) {
  // Acquire: pairs with the release in DeregisterRegion().
  return landing.region == nullptr ||
         !landing.region->leaving.load(std::memory_order_acquire);
}

void Inbox::Unpin(Region* region) {
  if (--region->pins == 0 && region->leaving.load(std::memory_order_relaxed)) {
    Changed();
  }
}

void Inbox::DivertLanding(Landing* landing) {
  absl::MutexLock lock(&mu_);
  if (landing->region != nullptr) Unpin(landing->region);
  landing->region = nullptr;
  landing->dst = nullptr;
  landing->discarded = true;
}

void Inbox::DropPiece(RegionId region, EarlyPiece* piece) {
  auto it = early_.find(region);
  if (it == early_.end()) return;
  auto& pieces = it->second;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].get() == piece) {
      early_bytes_ -= piece->data.size();
      pieces.erase(pieces.begin() + i);
      break;
    }
  }
  if (pieces.empty()) early_.erase(it);
}

absl::Status Inbox::EndWrite(int peer, Landing* landing) {
  absl::Status result;
  absl::MutexLock lock(&mu_);
  if (landing->region != nullptr) Unpin(landing->region);
  if (landing->piece != nullptr) {
    landing->piece->complete = true;
    // The region may have been registered, or retired, while this piece was
    // in flight.
    auto it = regions_.find(landing->header.region);
    if (it == regions_.end() && retired_.Contains(landing->header.region)) {
      DropPiece(landing->header.region, landing->piece);
      landing->discarded = true;
    } else if (it != regions_.end()) {
      absl::Status status = ApplyPiece(it->second.get(), landing->piece);
      DropPiece(landing->header.region, landing->piece);
      if (!status.ok()) {
        if (peers_[peer].status.ok()) peers_[peer].status = status;
        Changed();
        landing->discarded = true;
        result = status;
      }
    }
  }
  absl::Status noted = NoteWritePart(peer, *landing);
  *landing = Landing();
  if (result.ok() && !noted.ok()) {
    if (peers_[peer].status.ok()) peers_[peer].status = noted;
    Changed();
    result = noted;
  }
  return result;
}

void Inbox::AbandonWrite(Landing* landing) {
  absl::MutexLock lock(&mu_);
  if (landing->region != nullptr) Unpin(landing->region);
  if (landing->piece != nullptr) {
    DropPiece(landing->header.region, landing->piece);
  }
  *landing = Landing();
}

absl::Status Inbox::NoteWritePart(int peer, const Landing& landing) {
  PeerState& state = peers_[peer];
  const FrameHeader& h = landing.header;
  // Sequence numbers wrap: one at or past next_seq is at most 2^31 ahead.
  if (static_cast<uint32_t>(h.seq - state.next_seq) >= (uint32_t{1} << 31)) {
    return absl::DataLossError(absl::StrCat(
        options_.name(peer), " sent a part of write ", h.seq, " to region ",
        RegionName(h.region), " after that write was complete"));
  }
  if (h.part_count == 1 && h.seq == state.next_seq) {
    // The common case: a whole write, in order.
    PendingWrite write;
    write.region = h.region;
    write.imm = h.imm;
    write.begin = h.offset;
    write.end = h.offset + h.length;
    write.discarded = landing.discarded;
    Publish(peer, write);
    ++state.next_seq;
  } else {
    PendingWrite& write = state.pending[h.seq];
    // The parts of one write share region, imm and part count
    // (frame_format.md); one that does not would make its notice lie.
    if (write.parts_seen > 0 &&
        (write.region != h.region || write.imm != h.imm ||
         write.part_count != h.part_count)) {
      return absl::DataLossError(
          absl::StrCat(options_.name(peer), " sent parts of write ", h.seq,
                       " that disagree: region ", RegionName(write.region),
                       " imm ", write.imm, " of ", write.part_count,
                       " parts, then region ", RegionName(h.region), " imm ",
                       h.imm, " of ", h.part_count, " parts"));
    }
    if (write.parts_seen >= h.part_count) {
      return absl::DataLossError(absl::StrCat(options_.name(peer),
                                              " sent more than ", h.part_count,
                                              " parts of write ", h.seq));
    }
    write.region = h.region;
    write.imm = h.imm;
    write.part_count = h.part_count;
    write.begin = std::min(write.begin, h.offset);
    write.end = std::max(write.end, h.offset + h.length);
    write.discarded |= landing.discarded;
    ++write.parts_seen;
  }
  // Publish whatever became next in order.
  while (!state.pending.empty()) {
    auto it = state.pending.find(state.next_seq);
    if (it == state.pending.end() ||
        it->second.parts_seen < it->second.part_count) {
      break;
    }
    Publish(peer, it->second);
    state.pending.erase(it);
    ++state.next_seq;
  }
  return absl::OkStatus();
}

void Inbox::Publish(int peer, const PendingWrite& write) {
  // One lookup per write: Stale() and the choice of queue both need it.
  const bool registered = regions_.contains(write.region);
  if (!registered && retired_.Contains(write.region)) {
    ++stale_writes_dropped_;
    return;
  }
  if (write.discarded) return;
  WriteNotice notice;
  notice.peer = peer;
  notice.region = write.region;
  notice.offset_bytes = write.begin;
  notice.length_bytes = write.end - write.begin;
  notice.imm = write.imm;
  if (registered && !regions_.at(write.region)->applying_early) {
    notices_[write.region].push_back(notice);
    Changed();
  } else {
    deferred_notices_[write.region].push_back(notice);
  }
}

void Inbox::DeliverControl(int peer, uint32_t tag,
                           std::vector<std::byte> message) {
  absl::MutexLock lock(&mu_);
  control_[ControlKey(peer, tag)].push_back(std::move(message));
  Changed();
}

bool Inbox::FailPeer(int peer, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!peers_[peer].status.ok()) return false;
  peers_[peer].status = why;
  Changed();
  return true;
}

void Inbox::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  Changed();
}

absl::Status Inbox::PeerStatus(int peer) const {
  if (peer < 0 || peer >= options_.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", peer, " is not in the group of ", options_.size));
  }
  absl::MutexLock lock(&mu_);
  return peers_[peer].status;
}

size_t Inbox::early_bytes() const {
  absl::MutexLock lock(&mu_);
  return early_bytes_;
}

void Inbox::Changed() {
  epoch_.fetch_add(1, std::memory_order_release);
  changed_.SignalAll();
}

bool Inbox::SpinForChange(uint64_t seen, absl::Time until) const {
  for (int i = 1;; ++i) {
    if (epoch_.load(std::memory_order_acquire) != seen) return true;
    // Reading the clock costs more than a poll; look at it now and then, and
    // give the core away meanwhile: with more ranks than cores the write we
    // wait for may need this very core to be sent or received.
    if (i % 64 == 0) {
      if (absl::Now() >= until) return false;
      sched_yield();
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

absl::Status Inbox::WaitError(int peer) const {
  if (shut_down_) {
    return absl::FailedPreconditionError("transport is shutting down");
  }
  if (peer >= 0) return peers_[peer].status;
  for (const PeerState& state : peers_) {
    if (!state.status.ok()) return state.status;
  }
  return absl::OkStatus();
}

absl::StatusOr<WriteNotice> Inbox::WaitForWrite(const WriteMatch& match,
                                                absl::Time deadline) {
  const int peer = match.peer.has_value() ? *match.peer : -1;
  if (match.peer.has_value() &&
      (peer < 0 || peer >= options_.size || peer == options_.rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot wait for a write from rank ", peer, ": rank ",
                     options_.rank, " in a group of ", options_.size));
  }
  const absl::Time start = absl::Now();
  bool timed_out = false;
  // One bounded spin per call, before the first sleep: a write that lands
  // within it is returned without a futex wake-up.
  bool may_spin = options_.wait_spin > absl::ZeroDuration();
  uint64_t seen = 0;
  mu_.Lock();
  while (true) {
    if (may_spin) {
      // Re-checked below under the lock; a change since is seen by the spin.
      seen = epoch_.load(std::memory_order_acquire);
    }
    auto it = notices_.find(match.region);
    if (it != notices_.end()) {
      auto& queue = it->second;
      for (auto n = queue.begin(); n != queue.end(); ++n) {
        if ((peer < 0 || n->peer == peer) &&
            (!match.imm.has_value() || n->imm == *match.imm)) {
          WriteNotice notice = *n;
          queue.erase(n);
          mu_.Unlock();
          return notice;
        }
      }
    }
    absl::Status error = WaitError(peer);
    if (!error.ok()) {
      mu_.Unlock();
      return error;
    }
    if (timed_out) {
      // A timeout names whom we waited for.
      std::string from;
      if (peer >= 0) {
        from = options_.name(peer);
      } else {
        std::vector<std::string> names;
        for (int r = 0; r < options_.size; ++r) {
          if (r != options_.rank) names.push_back(options_.name(r));
        }
        from = absl::StrCat("any of ", absl::StrJoin(names, ", "));
      }
      mu_.Unlock();
      return absl::DeadlineExceededError(absl::StrCat(
          "no write to region ", RegionName(match.region),
          match.imm.has_value() ? absl::StrCat(" with imm ", *match.imm) : "",
          " from ", from, " within ",
          absl::FormatDuration(absl::Now() - start)));
    }
    if (may_spin) {
      may_spin = false;
      mu_.Unlock();
      const bool changed = SpinForChange(
          seen, std::min(deadline, absl::Now() + options_.wait_spin));
      mu_.Lock();
      // A change between the spin's end and the lock signalled no one.
      if (changed || epoch_.load(std::memory_order_acquire) != seen) continue;
    }
    timed_out = changed_.WaitWithDeadline(&mu_, deadline);
  }
}

absl::Status Inbox::CheckControlPeer(int peer) const {
  if (peer < 0 || peer >= options_.size || peer == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot receive a control message from rank ", peer, ": rank ",
        options_.rank, " in a group of ", options_.size));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::vector<std::byte>>> Inbox::TakeControlLocked(
    int peer, uint32_t tag) {
  auto it = control_.find(ControlKey(peer, tag));
  if (it != control_.end() && !it->second.empty()) {
    std::vector<std::byte> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) control_.erase(it);
    return std::optional<std::vector<std::byte>>(std::move(message));
  }
  absl::Status error = WaitError(peer);
  if (!error.ok()) return error;
  return std::nullopt;
}

absl::StatusOr<std::optional<std::vector<std::byte>>> Inbox::TryRecvControl(
    int peer, uint32_t tag) {
  STARLING_RETURN_IF_ERROR(CheckControlPeer(peer));
  absl::MutexLock lock(&mu_);
  return TakeControlLocked(peer, tag);
}

absl::StatusOr<std::vector<std::byte>> Inbox::RecvControl(int peer,
                                                          uint32_t tag,
                                                          absl::Time deadline) {
  STARLING_RETURN_IF_ERROR(CheckControlPeer(peer));
  const absl::Time start = absl::Now();
  bool timed_out = false;
  absl::MutexLock lock(&mu_);
  while (true) {
    absl::StatusOr<std::optional<std::vector<std::byte>>> message =
        TakeControlLocked(peer, tag);
    if (!message.ok()) return message.status();
    if (message->has_value()) return **std::move(message);
    if (timed_out) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no control message with tag ", tag, " from ", options_.name(peer),
          " within ", absl::FormatDuration(absl::Now() - start)));
    }
    timed_out = changed_.WaitWithDeadline(&mu_, deadline);
  }
}

}  // namespace transport
}  // namespace starling
