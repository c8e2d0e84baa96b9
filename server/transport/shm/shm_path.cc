#include "server/transport/shm/shm_path.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/base/secure_random.h"
#include "server/base/status_macros.h"
#include "server/transport/frame.h"
#include "server/transport/frame_receiver.h"
#include "server/transport/inbox.h"

namespace starling {
namespace transport {
namespace shm {
namespace {

constexpr char kProvider[] = "shm";
constexpr char kNamePrefix[] = "/starling-shm-";
constexpr uint64_t kMinRingBytes = uint64_t{64} << 10;
constexpr uint64_t kMaxRingBytes = uint64_t{1} << 30;
// Idle polls before the path's thread sleeps on its doorbell, and the
// longest sleep (a writer that lost its wake-up still goes on after it).
constexpr int kIdleSpins = 8;
constexpr absl::Duration kLongestSleep = absl::Milliseconds(100);
// Control frames never travel on this path; the receiver's bound for them.
constexpr size_t kMaxControlBytes = 4096;

bool IsSegmentName(const std::string& text) {
  if (!absl::StartsWith(text, kNamePrefix) || text.size() > 96) return false;
  return std::all_of(text.begin() + 1, text.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '-'; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmPath>> ShmPath::Open(
    const ShmPathOptions& options, int rank, int size, RankNamer name) {
  if (options.ring_bytes < kMinRingBytes ||
      options.ring_bytes > kMaxRingBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: a ring of ", options.ring_bytes,
                     " bytes is not between 64 KiB and 1 GiB"));
  }
  if (size > static_cast<int>(kMaxRanks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory: a group of ", size, " is more than ", kMaxRanks));
  }
  STARLING_ASSIGN_OR_RETURN(const uint64_t nonce,
                            SecureRandom64("a shared-memory segment's name"));
  STARLING_ASSIGN_OR_RETURN(const uint64_t probe,
                            SecureRandom64("a shared-memory probe"));
  std::unique_ptr<ShmPath> path(
      new ShmPath(options, rank, size, std::move(name),
                  absl::StrFormat("%s%d-%016x", kNamePrefix, getpid(), nonce)));
  path->probe_ = probe | 1;
  return path;
}

ShmPath::ShmPath(const ShmPathOptions& options, int rank, int size,
                 RankNamer name, std::string segment_name)
    : options_(options),
      rank_(rank),
      size_(size),
      name_(std::move(name)),
      own_name_(name_(rank)),
      segment_name_(std::move(segment_name)),
      peer_segments_(size),
      peer_probes_(size),
      links_(size) {}

ShmPath::~ShmPath() { Stop(); }

fabric::FabricHello ShmPath::HelloFor(int /*peer*/) const {
  fabric::FabricHello hello;
  hello.usable = true;
  hello.rank = static_cast<uint32_t>(rank_);
  hello.size = static_cast<uint32_t>(size_);
  hello.slot_bytes = static_cast<uint32_t>(options_.ring_bytes);
  hello.slots = 1;
  hello.provider = kProvider;
  hello.text = segment_name_;
  hello.credit_base = reinterpret_cast<uint64_t>(&probe_);
  hello.credit_key = probe_;
  return hello;
}

absl::Status ShmPath::Connect(int peer, const fabric::FabricHello& hello) {
  if (hello.provider != kProvider || !IsSegmentName(hello.text)) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_(peer), " offered shared memory as provider '", hello.provider,
        "' at '", hello.text, "', not a Starling segment"));
  }
  peer_segments_[peer] = hello.text;
  peer_probes_[peer] = {hello.credit_base, hello.credit_key};
  return absl::OkStatus();
}

absl::Status ShmPath::Establish(absl::Time deadline) {
  std::vector<int> peers;
  for (int p = 0; p < size_; ++p) {
    if (!peer_segments_[p].empty()) peers.push_back(p);
  }
  if (peers.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<ShmSegment>> own =
      ShmSegment::Create(segment_name_, kProtocolVersion, size_, rank_,
                         options_.ring_bytes, peers);
  if (!own.ok()) {
    return absl::Status(own.status().code(),
                        absl::StrCat(own_name_, ": ", own.status().message()));
  }
  own_ = *std::move(own);
  for (int p : peers) {
    const std::string& segment_name = peer_segments_[p];
    std::unique_ptr<ShmSegment> segment;
    absl::Duration backoff = absl::Milliseconds(1);
    while (true) {
      absl::StatusOr<std::unique_ptr<ShmSegment>> opened =
          ShmSegment::Open(segment_name);
      if (opened.ok()) {
        segment = *std::move(opened);
        break;
      }
      if (!absl::IsNotFound(opened.status())) {
        return absl::Status(opened.status().code(),
                            absl::StrCat("shared memory with ", name_(p), ": ",
                                         opened.status().message()));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "shared memory: ", name_(p), " did not create its segment ",
            segment_name, " in time (", opened.status().message(), ")"));
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(50));
    }
    const SegmentHeader* h = segment->header();
    if (h->version != kProtocolVersion || h->rank != static_cast<uint32_t>(p) ||
        h->group_size != static_cast<uint32_t>(size_)) {
      return absl::FailedPreconditionError(
          absl::StrCat("shared memory: ", segment_name, " of ", name_(p),
                       " is rank ", h->rank, " of ", h->group_size,
                       " speaking version ", h->version, "; expected rank ", p,
                       " of ", size_, " speaking version ", kProtocolVersion));
    }
    auto link = std::make_unique<RingLink>();
    link->peer = p;
    link->name = name_(p);
    link->close_on_shutdown = false;
    link->records = true;
    link->Map(rank_, own_.get(), std::move(segment));
    // Release: the writer, once it sees the flag, sends references.
    if (options_.single_copy && CanReadProcess(link->pid, peer_probes_[p].first,
                                               peer_probes_[p].second)) {
      own_->ring(p)->reads_sender.store(1, std::memory_order_release);
      ++single_copy_peers_;
    }
    links_[p] = std::move(link);
  }
  return absl::OkStatus();
}

void ShmPath::Attach(Sink sink) {
  sink_ = std::move(sink);
  if (own_ == nullptr) return;
  for (auto& link : links_) {
    if (link == nullptr) continue;
    link->receiver = std::make_unique<FrameReceiver>(
        link->peer, name_, sink_.inbox, kMaxControlBytes);
  }
  thread_ = std::thread([this] { Loop(); });
}

void ShmPath::Wake() {
  if (own_ == nullptr) return;
  wake_pending_.store(true, std::memory_order_relaxed);
  DoorbellRing(&own_->header()->doorbell);
}

void ShmPath::Loop() {
  DoorbellLoop(
      &own_->header()->doorbell, stopping_, kIdleSpins, kLongestSleep,
      [this] {
        if (!unlinked_) UnlinkWhenMapped();
      },
      [this] { return Poll(); });
}

bool ShmPath::Poll() {
  const bool recheck = wake_pending_.exchange(false, std::memory_order_relaxed);
  bool progress = false;
  for (auto& link : links_) {
    if (link == nullptr) continue;
    const int peer = link->peer;
    progress |= ServiceLink(link.get(), recheck,
                            [&](const FrameReceiver::Result& result) {
                              sink_.fail_peer(peer, result.error);
                            })
                    .progress;
  }
  return progress;
}

void ShmPath::UnlinkWhenMapped() {
  for (const auto& link : links_) {
    if (link != nullptr && own_->header()->mapped_by[link->peer].load(
                               std::memory_order_acquire) == 0) {
      return;
    }
  }
  own_->Unlink();
  unlinked_ = true;
}

void ShmPath::PostWrite(int peer, absl::Span<const std::byte> data,
                        RegionId remote, uint64_t remote_offset_bytes,
                        uint32_t imm, Completion* done) {
  absl::Status status =
      links_[peer]->PostWrite(data, remote, remote_offset_bytes, imm, done);
  if (!status.ok()) sink_.fail_peer(peer, status);
}

void ShmPath::FailPeer(int peer, const absl::Status& why) {
  RingLink* link = links_[peer].get();
  if (link == nullptr) return;
  link->sender->Fail(why);
  link->dead.store(true, std::memory_order_release);
  Wake();
}

void ShmPath::Drain(absl::Time deadline) {
  // The readers take what is in their rings on their own threads; nothing
  // tells this one, so look until they have (at shutdown only).
  while (absl::Now() < deadline) {
    bool drained = true;
    for (const auto& link : links_) {
      if (link == nullptr || link->dead.load(std::memory_order_acquire)) {
        continue;
      }
      if (!link->sender->Idle() ||
          link->out->tail.load(std::memory_order_acquire) !=
              link->out->head.load(std::memory_order_acquire)) {
        drained = false;
        break;
      }
    }
    if (drained) return;
    absl::SleepFor(absl::Microseconds(200));
  }
}

void ShmPath::Stop() {
  if (thread_.joinable()) {
    stopping_.store(true, std::memory_order_relaxed);
    DoorbellRing(&own_->header()->doorbell);
    thread_.join();
  }
  const absl::Status why = absl::FailedPreconditionError(
      absl::StrCat(own_name_, " shut its shared-memory path down"));
  for (auto& link : links_) {
    if (link == nullptr) continue;
    link->sender->Fail(why);
    if (link->receiver != nullptr) link->receiver->Abandon();
  }
  if (own_ != nullptr) own_->Unlink();
}

}  // namespace shm
}  // namespace transport
}  // namespace starling
