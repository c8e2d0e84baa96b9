#include "server/transport/inbox_transport.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {

namespace {

// The subclass's wake-up, then every adopted path's.
Inbox::Options WakingPathsToo(Inbox::Options options,
                              std::function<void()> wake_paths) {
  options.wake_io = [stream = std::move(options.wake_io),
                     paths = std::move(wake_paths)] {
    if (stream) stream();
    paths();
  };
  return options;
}

}  // namespace

InboxTransport::InboxTransport(Inbox::Options inbox_options,
                               size_t max_control_bytes)
    : rank_(inbox_options.rank),
      size_(inbox_options.size),
      max_control_bytes_(max_control_bytes),
      inbox_(WakingPathsToo(std::move(inbox_options),
                            [this] {
                              for (WritePath* path : Paths()) path->Wake();
                            })),
      path_of_(new std::atomic<WritePath*>[size_ > 0 ? size_ : 1]) {
  for (int peer = 0; peer < size_; ++peer) {
    path_of_[peer].store(nullptr, std::memory_order_relaxed);
  }
}

absl::Status InboxTransport::AdoptWritePath(std::unique_ptr<WritePath> path,
                                            const std::vector<int>& peers) {
  for (int peer : peers) {
    if (!ValidPeer(peer) ||
        path_of_[peer].load(std::memory_order_acquire) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot carry ", PeerName(peer), "'s writes over ",
                       path->name(), ": not another rank of this group, or ",
                       "its writes have a path already"));
    }
  }
  WritePath* raw = path.get();
  raw->Attach(WritePath::Sink{
      &inbox_, [this](int peer, const absl::Status& why) {
        if (!ValidPeer(peer)) return;
        // Makes `why` sticky first, then tells the peer on the stream.
        inbox_.FailPeer(peer, why);
        FailPeer(peer, inbox_.PeerStatus(peer), /*tell_peer=*/true,
                 /*orderly=*/false);
      }});
  {
    absl::MutexLock lock(&paths_mu_);
    paths_.push_back(std::move(path));
  }
  for (int peer : peers) {
    path_of_[peer].store(raw, std::memory_order_release);
    // A peer lost before the path was adopted is lost on it too.
    absl::Status status = inbox_.PeerStatus(peer);
    if (!status.ok()) raw->FailPeer(peer, status);
  }
  return absl::OkStatus();
}

std::string InboxTransport::PathName(int peer,
                                     const std::string& stream_name) const {
  if (peer < 0 || peer >= size_) return stream_name;
  WritePath* path = path_of_[peer].load(std::memory_order_acquire);
  return path == nullptr ? stream_name : path->name();
}

std::vector<WritePath*> InboxTransport::Paths() {
  absl::MutexLock lock(&paths_mu_);
  std::vector<WritePath*> paths;
  for (auto& path : paths_) paths.push_back(path.get());
  return paths;
}

void InboxTransport::DrainWritePaths(absl::Time deadline) {
  for (WritePath* path : Paths()) path->Drain(deadline);
}

void InboxTransport::StopWritePaths() {
  for (WritePath* path : Paths()) path->Stop();
}

void InboxTransport::FailWritePath(int peer, const absl::Status& why) {
  if (peer < 0 || peer >= size_) return;
  WritePath* path = path_of_[peer].load(std::memory_order_acquire);
  if (path != nullptr) path->FailPeer(peer, why);
}

bool InboxTransport::ValidPeer(int peer) const {
  return peer >= 0 && peer < size() && peer != rank();
}

void InboxTransport::LogPeerFailure(int peer, const absl::Status& sticky,
                                    bool orderly) const {
  if (orderly || shutting_down_.load(std::memory_order_relaxed)) {
    STARLING_LOG(INFO) << PeerName(rank()) << ": " << sticky;
  } else {
    STARLING_LOG(ERROR) << PeerName(rank()) << " lost " << PeerName(peer)
                        << ": " << sticky;
  }
}

absl::Status InboxTransport::RegisterRegion(RegionId id,
                                            absl::Span<std::byte> memory) {
  return inbox_.RegisterRegion(id, memory);
}

absl::Status InboxTransport::DeregisterRegion(RegionId id) {
  return inbox_.DeregisterRegion(id);
}

void InboxTransport::RetireRegions(RegionId first, RegionId end) {
  inbox_.RetireRegions(first, end);
}

uint64_t InboxTransport::stale_writes_dropped() const {
  return inbox_.stale_writes_dropped();
}

void InboxTransport::Write(int peer, absl::Span<const std::byte> data,
                           RegionId remote, uint64_t remote_offset_bytes,
                           uint32_t imm, Completion* done) {
  done->Add(1);
  if (absl::Status checked = CheckWrite(peer, data.size(), remote_offset_bytes);
      !checked.ok()) {
    done->Finish(checked);
    return;
  }
  // The inbox holds the sticky status first (FailPeer() fails the senders
  // after it): checking it here means a caller that saw the peer fail never
  // gets a later write completed Ok.
  absl::Status sticky = inbox_.PeerStatus(peer);
  if (!sticky.ok()) {
    done->Finish(sticky);
    return;
  }
  WritePath* path = path_of_[peer].load(std::memory_order_acquire);
  if (path != nullptr) {
    path->PostWrite(peer, data, remote, remote_offset_bytes, imm, done);
    return;
  }
  PostWrite(peer, data, remote, remote_offset_bytes, imm, done);
}

absl::StatusOr<WriteNotice> InboxTransport::WaitForWrite(
    const WriteMatch& match, absl::Time deadline) {
  return inbox_.WaitForWrite(match, deadline);
}

absl::Status InboxTransport::CheckWrite(int peer, size_t bytes,
                                        uint64_t remote_offset_bytes) const {
  if (!ValidPeer(peer)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write from rank ",
                                                   rank(), " to rank ", peer,
                                                   " in a group of ", size()));
  }
  if (remote_offset_bytes + bytes < remote_offset_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "write of ", bytes, " bytes at offset ", remote_offset_bytes, " to ",
        PeerName(peer), " overflows"));
  }
  return absl::OkStatus();
}

absl::Status InboxTransport::CheckControl(int peer,
                                          size_t message_bytes) const {
  if (!ValidPeer(peer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot send a control message from rank ", rank(),
                     " to rank ", peer, " in a group of ", size()));
  }
  if (message_bytes > max_control_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control message of ", message_bytes, " bytes to ", PeerName(peer),
        " exceeds max_control_bytes ", max_control_bytes_));
  }
  return inbox_.PeerStatus(peer);
}

absl::Status InboxTransport::SendControl(int peer, uint32_t tag,
                                         absl::Span<const std::byte> message) {
  STARLING_RETURN_IF_ERROR(CheckControl(peer, message.size()));
  absl::Status status =
      PostControl(peer, ControlFrameHeader(tag, message.size()),
                  std::vector<std::byte>(message.begin(), message.end()));
  if (!status.ok()) {
    FailPeer(peer, status, /*tell_peer=*/false, /*orderly=*/false);
    return inbox_.PeerStatus(peer);
  }
  return absl::OkStatus();
}

absl::Status InboxTransport::SendControlThenWrite(
    int peer, uint32_t tag, absl::Span<const std::byte> message,
    absl::Span<const std::byte> data, RegionId remote,
    uint64_t remote_offset_bytes, uint32_t imm, Completion* done) {
  if (!CheckControl(peer, message.size()).ok() ||
      !CheckWrite(peer, data.size(), remote_offset_bytes).ok() ||
      path_of_[peer].load(std::memory_order_acquire) != nullptr) {
    // Each call reports its own problem (or goes its own way) as it would
    // alone.
    return Transport::SendControlThenWrite(peer, tag, message, data, remote,
                                           remote_offset_bytes, imm, done);
  }
  done->Add(1);
  absl::Status status = PostControlThenWrite(
      peer, ControlFrameHeader(tag, message.size()),
      std::vector<std::byte>(message.begin(), message.end()), data, remote,
      remote_offset_bytes, imm, done);
  if (!status.ok()) {
    FailPeer(peer, status, /*tell_peer=*/false, /*orderly=*/false);
    return inbox_.PeerStatus(peer);
  }
  return absl::OkStatus();
}

absl::Status InboxTransport::PostControlThenWrite(
    int peer, const FrameHeader& control, std::vector<std::byte> message,
    absl::Span<const std::byte> data, RegionId remote,
    uint64_t remote_offset_bytes, uint32_t imm, Completion* done) {
  absl::Status status = PostControl(peer, control, std::move(message));
  if (!status.ok()) {
    done->Finish(status);
    return status;
  }
  PostWrite(peer, data, remote, remote_offset_bytes, imm, done);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> InboxTransport::RecvControl(
    int peer, uint32_t tag, absl::Time deadline) {
  return inbox_.RecvControl(peer, tag, deadline);
}

absl::StatusOr<std::optional<std::vector<std::byte>>>
InboxTransport::TryRecvControl(int peer, uint32_t tag) {
  return inbox_.TryRecvControl(peer, tag);
}

absl::Status InboxTransport::PeerStatus(int peer) const {
  return inbox_.PeerStatus(peer);
}

void InboxTransport::AbortPeer(int peer, const absl::Status& why) {
  if (!ValidPeer(peer)) return;
  FailPeer(peer, why.ok() ? absl::AbortedError("aborted") : why,
           /*tell_peer=*/false, /*orderly=*/false);
}

}  // namespace transport
}  // namespace starling
