#include "server/transport/loopback/loopback_transport.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace loopback {
namespace {

std::string Name(int rank) {
  return absl::StrCat("rank ", rank, " (loopback)");
}

}  // namespace

LoopbackTransport::LoopbackTransport(LoopbackFabric* fabric, int rank, int size)
    : fabric_(fabric), rank_(rank) {
  absl::MutexLock lock(&mu_);
  peer_status_.assign(size, absl::OkStatus());
}

int LoopbackTransport::size() const { return fabric_->size(); }

std::string LoopbackTransport::PeerName(int rank) const { return Name(rank); }

absl::Status LoopbackTransport::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, " (loopback): no peer ", peer,
                     " in a group of ", size()));
  }
  return absl::OkStatus();
}

absl::Status LoopbackTransport::RegisterRegion(RegionId id,
                                               absl::Span<std::byte> memory) {
  absl::MutexLock lock(&mu_);
  if (retired_.Contains(id)) {
    return absl::FailedPreconditionError(
        absl::StrCat(Name(rank_), ": region ", id,
                     " was retired and cannot be registered again"));
  }
  if (regions_.count(id) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat(Name(rank_), ": region ", id, " is already registered"));
  }
  regions_[id] = memory;
  auto held = held_.find(id);
  if (held == held_.end()) return absl::OkStatus();
  // Apply early writes in arrival order. One that does not fit is dropped
  // (its writer was already told the write succeeded; a real transport would
  // have failed it, which the collective layer sees as missing data).
  for (HeldWrite& write : held->second) {
    held_bytes_ -= write.bytes.size();
    if (write.offset_bytes + write.bytes.size() > memory.size()) {
      STARLING_LOG(ERROR) << Name(rank_) << ": held write of "
                          << write.bytes.size() << " bytes at offset "
                          << write.offset_bytes << " from " << Name(write.peer)
                          << " does not fit region " << id << " of "
                          << memory.size() << " bytes; dropped";
      continue;
    }
    if (!write.bytes.empty()) {
      std::memcpy(memory.data() + write.offset_bytes, write.bytes.data(),
                  write.bytes.size());
    }
    notices_[id].push_back(WriteNotice{write.peer, id, write.offset_bytes,
                                       write.bytes.size(), write.imm});
  }
  held_.erase(held);
  return absl::OkStatus();
}

absl::Status LoopbackTransport::DeregisterRegion(RegionId id) {
  absl::MutexLock lock(&mu_);
  if (regions_.erase(id) == 0) {
    return absl::NotFoundError(
        absl::StrCat(Name(rank_), ": region ", id, " is not registered"));
  }
  notices_.erase(id);
  return absl::OkStatus();
}

void LoopbackTransport::RetireRegions(RegionId first, RegionId end) {
  absl::MutexLock lock(&mu_);
  retired_.Add(first, end);
  for (auto it = held_.begin(); it != held_.end();) {
    if (!retired_.Contains(it->first)) {
      ++it;
      continue;
    }
    for (const HeldWrite& write : it->second) {
      held_bytes_ -= write.bytes.size();
    }
    stale_writes_dropped_ += it->second.size();
    it = held_.erase(it);
  }
}

uint64_t LoopbackTransport::stale_writes_dropped() const {
  absl::MutexLock lock(&mu_);
  return stale_writes_dropped_;
}

absl::Status LoopbackTransport::Deliver(int from,
                                        absl::Span<const std::byte> data,
                                        RegionId region, uint64_t offset_bytes,
                                        uint32_t imm) {
  absl::MutexLock lock(&mu_);
  if (!peer_status_[from].ok()) return peer_status_[from];
  auto it = regions_.find(region);
  if (it == regions_.end() && retired_.Contains(region)) {
    // A late write of a finished op: the writer is done with it either way.
    ++stale_writes_dropped_;
    return absl::OkStatus();
  }
  if (it == regions_.end()) {
    if (held_bytes_ + data.size() > fabric_->options().max_held_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          Name(rank_), ": ", held_bytes_,
          " bytes of early writes already held; write of ", data.size(),
          " bytes to unregistered region ", region, " refused"));
    }
    held_bytes_ += data.size();
    held_[region].push_back(
        HeldWrite{from, offset_bytes, imm,
                  std::vector<std::byte>(data.begin(), data.end())});
    return absl::OkStatus();
  }
  const absl::Span<std::byte> memory = it->second;
  if (offset_bytes > memory.size() ||
      data.size() > memory.size() - offset_bytes) {
    const absl::Status status = absl::DataLossError(
        absl::StrCat("write of ", data.size(), " bytes at offset ",
                     offset_bytes, " from ", Name(from), " overruns region ",
                     region, " of ", memory.size(), " bytes on ", Name(rank_)));
    STARLING_LOG(ERROR) << status.message();
    return status;
  }
  if (!data.empty()) {
    std::memcpy(memory.data() + offset_bytes, data.data(), data.size());
  }
  notices_[region].push_back(
      WriteNotice{from, region, offset_bytes, data.size(), imm});
  return absl::OkStatus();
}

void LoopbackTransport::Write(int peer, absl::Span<const std::byte> data,
                              RegionId remote, uint64_t remote_offset_bytes,
                              uint32_t imm, Completion* done) {
  done->Add(1);
  if (absl::Status s = CheckPeer(peer); !s.ok()) {
    done->Finish(s);
    return;
  }
  if (absl::Status s = PeerStatus(peer); !s.ok()) {
    done->Finish(s);
    return;
  }
  done->Finish(fabric_->endpoint(peer)->Deliver(rank_, data, remote,
                                                remote_offset_bytes, imm));
}

absl::StatusOr<WriteNotice> LoopbackTransport::WaitForWrite(
    const WriteMatch& match, absl::Time deadline) {
  if (match.peer.has_value()) {
    if (absl::Status s = CheckPeer(*match.peer); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  std::deque<WriteNotice>::iterator found;
  absl::Status lost;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto queue = notices_.find(match.region);
    if (queue != notices_.end()) {
      for (auto it = queue->second.begin(); it != queue->second.end(); ++it) {
        if (match.peer.has_value() && it->peer != *match.peer) continue;
        if (match.imm.has_value() && it->imm != *match.imm) continue;
        found = it;
        return true;
      }
    }
    for (int p = 0; p < static_cast<int>(peer_status_.size()); ++p) {
      if (match.peer.has_value() && p != *match.peer) continue;
      if (!peer_status_[p].ok()) {
        lost = peer_status_[p];
        return true;
      }
    }
    return false;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        Name(rank_), ": no write to region ", match.region, " from ",
        match.peer.has_value() ? Name(*match.peer) : "any rank",
        " before the deadline"));
  }
  if (!lost.ok()) return lost;
  const WriteNotice notice = *found;
  notices_[match.region].erase(found);
  return notice;
}

absl::Status LoopbackTransport::DeliverControl(
    int from, uint32_t tag, absl::Span<const std::byte> message) {
  absl::MutexLock lock(&mu_);
  if (!peer_status_[from].ok()) return peer_status_[from];
  control_[{from, tag}].emplace_back(message.begin(), message.end());
  return absl::OkStatus();
}

absl::Status LoopbackTransport::SendControl(
    int peer, uint32_t tag, absl::Span<const std::byte> message) {
  STARLING_RETURN_IF_ERROR(CheckPeer(peer));
  if (message.size() > max_control_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control message of ", message.size(), " bytes to ", Name(peer),
        " exceeds the limit of ", max_control_bytes(), " bytes"));
  }
  STARLING_RETURN_IF_ERROR(PeerStatus(peer));
  return fabric_->endpoint(peer)->DeliverControl(rank_, tag, message);
}

absl::StatusOr<std::optional<std::vector<std::byte>>>
LoopbackTransport::TakeControlLocked(int peer, uint32_t tag) {
  auto it = control_.find(std::pair<int, uint32_t>(peer, tag));
  if (it != control_.end() && !it->second.empty()) {
    std::vector<std::byte> message = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) control_.erase(it);
    return std::optional<std::vector<std::byte>>(std::move(message));
  }
  if (!peer_status_[peer].ok()) return peer_status_[peer];
  return std::nullopt;
}

absl::StatusOr<std::vector<std::byte>> LoopbackTransport::RecvControl(
    int peer, uint32_t tag, absl::Time deadline) {
  STARLING_RETURN_IF_ERROR(CheckPeer(peer));
  absl::MutexLock lock(&mu_);
  const std::pair<int, uint32_t> key(peer, tag);
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = control_.find(key);
    return (it != control_.end() && !it->second.empty()) ||
           !peer_status_[peer].ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(Name(rank_), ": no control message with tag ", tag,
                     " from ", Name(peer), " before the deadline"));
  }
  // `ready` held: a message, or the peer's error.
  STARLING_ASSIGN_OR_RETURN(std::optional<std::vector<std::byte>> message,
                            TakeControlLocked(peer, tag));
  if (!message.has_value()) {
    return absl::InternalError("loopback control queue emptied under its lock");
  }
  return *std::move(message);
}

absl::StatusOr<std::optional<std::vector<std::byte>>>
LoopbackTransport::TryRecvControl(int peer, uint32_t tag) {
  STARLING_RETURN_IF_ERROR(CheckPeer(peer));
  absl::MutexLock lock(&mu_);
  return TakeControlLocked(peer, tag);
}

size_t LoopbackTransport::max_control_bytes() const {
  return fabric_->options().max_control_bytes;
}

absl::Status LoopbackTransport::PeerStatus(int peer) const {
  STARLING_RETURN_IF_ERROR(CheckPeer(peer));
  absl::MutexLock lock(&mu_);
  return peer_status_[peer];
}

void LoopbackTransport::MarkLost(int peer, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (peer_status_[peer].ok()) peer_status_[peer] = why;
}

void LoopbackTransport::AbortPeer(int peer, const absl::Status& why) {
  if (!CheckPeer(peer).ok()) return;
  // Writes complete synchronously here, so none is pending to finish.
  MarkLost(peer, why.ok() ? absl::UnavailableError(
                                absl::StrCat(Name(peer), " aborted"))
                          : why);
  fabric_->endpoint(peer)->MarkLost(
      rank_, absl::UnavailableError(absl::StrCat(
                 Name(rank_), " closed the connection: ", why.message())));
}

LoopbackFabric::LoopbackFabric(int size, const Options& options)
    : options_(options) {
  STARLING_CHECK(size >= 1) << "loopback fabric of " << size << " ranks";
  endpoints_.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    endpoints_.push_back(std::unique_ptr<LoopbackTransport>(
        new LoopbackTransport(this, rank, size)));
  }
}

void LoopbackFabric::KillRankForTesting(int rank) {
  const absl::Status killed =
      absl::UnavailableError(absl::StrCat(Name(rank), " was killed"));
  for (int other = 0; other < size(); ++other) {
    if (other == rank) continue;
    endpoints_[other]->MarkLost(rank, killed);
    endpoints_[rank]->MarkLost(other, killed);
  }
}

}  // namespace loopback
}  // namespace transport
}  // namespace starling
