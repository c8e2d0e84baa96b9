#include "server/transport/shm/shm_transport.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/transport/frame_receiver.h"
#include "server/transport/frame_sender.h"

namespace starling {
namespace transport {
namespace shm {
namespace {

// Idle polls before the I/O thread sleeps on its doorbell.
constexpr int kIdleSpins = 64;

}  // namespace

std::string ShmTransport::SegmentName(const std::string& job_id, int rank) {
  return absl::StrCat("/starling-", job_id, "-r", rank);
}

ShmTransport::ShmTransport(const ShmOptions& options)
    : InboxTransport(
          Inbox::Options{options.rank, options.size, options.max_early_bytes,
                         [this](int r) { return PeerName(r); },
                         [this](int peer, const absl::Status& why) {
                           FailPeer(peer, why, true, false);
                         },
                         [this] {
                           wake_pending_.store(true, std::memory_order_relaxed);
                           Wake();
                         }},
          options.max_control_bytes),
      options_(options) {}

std::string ShmTransport::PeerName(int rank) const {
  if (rank < 0 || rank >= size()) return absl::StrCat("rank ", rank);
  return absl::StrCat("rank ", rank, " (shm ",
                      SegmentName(options_.job_id, rank), ")");
}

absl::StatusOr<std::unique_ptr<ShmTransport>> ShmTransport::Create(
    const ShmOptions& options) {
  if (options.size < 1 || options.size > static_cast<int>(kMaxRanks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("group size ", options.size, " is not in 1..", kMaxRanks));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is not in the group of ", options.size));
  }
  if (options.job_id.empty() ||
      !std::all_of(options.job_id.begin(), options.job_id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job id \"", options.job_id, "\" must be letters, digits, - or _"));
  }
  if (options.ring_bytes < 64 * 1024) {
    return absl::InvalidArgumentError("ring_bytes must be at least 64 KiB");
  }
  std::unique_ptr<ShmTransport> transport(new ShmTransport(options));
  STARLING_RETURN_IF_ERROR(transport->Start());
  return transport;
}

absl::Status ShmTransport::Start() {
  const int me = rank();
  STARLING_ASSIGN_OR_RETURN(
      own_, ShmSegment::Create(SegmentName(options_.job_id, me),
                               options_.protocol_version_for_testing, size(),
                               me, options_.ring_bytes));
  const absl::Time deadline = absl::Now() + options_.connect_timeout;
  links_.resize(size());
  for (int p = 0; p < size(); ++p) {
    if (p == me) continue;
    auto link = std::make_unique<RingLink>();
    link->peer = p;
    link->name = PeerName(p);
    std::unique_ptr<ShmSegment> remote;
    absl::Duration backoff = absl::Milliseconds(1);
    while (true) {
      absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
          ShmSegment::Open(SegmentName(options_.job_id, p));
      if (segment.ok() && ProcessIsDead((*segment)->header()->pid)) {
        segment = absl::NotFoundError("stale segment of a dead process");
      }
      if (segment.ok()) {
        remote = std::move(*segment);
        break;
      }
      if (!absl::IsNotFound(segment.status())) return segment.status();
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            PeerName(me), " gave up after ",
            absl::FormatDuration(options_.connect_timeout), " waiting for ",
            link->name, " to create its segment"));
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(50));
    }
    const SegmentHeader* h = remote->header();
    if (h->version != options_.protocol_version_for_testing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "protocol version mismatch: ", link->name, " speaks version ",
          h->version, ", ", PeerName(me), " speaks version ",
          options_.protocol_version_for_testing));
    }
    if (h->group_size != static_cast<uint32_t>(size()) ||
        h->rank != static_cast<uint32_t>(p)) {
      return absl::FailedPreconditionError(
          absl::StrCat("group mismatch: ", link->name, " has rank ", h->rank,
                       " in a group of ", h->group_size, ", ", PeerName(me),
                       " expects rank ", p, " of ", size()));
    }
    link->Map(me, own_.get(), std::move(remote));
    link->receiver = std::make_unique<FrameReceiver>(
        p, [this](int r) { return PeerName(r); }, inbox(),
        options_.max_control_bytes);
    links_[p] = std::move(link);
  }
  // Once every peer has mapped our segment its name can go: nothing is left
  // in /dev/shm even if this process is killed later.
  while (true) {
    std::vector<std::string> missing;
    for (int p = 0; p < size(); ++p) {
      if (p != me &&
          own_->header()->mapped_by[p].load(std::memory_order_acquire) == 0) {
        missing.push_back(PeerName(p));
      }
    }
    if (missing.empty()) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(PeerName(me), " gave up waiting for ",
                       absl::StrJoin(missing, ", "), " to map its segment"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  own_->Unlink();
  {
    absl::MutexLock lock(&eof_mu_);
    open_links_ = size() - 1;
  }
  io_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

ShmTransport::~ShmTransport() {
  BeginShutdown();
  if (io_.joinable()) {
    FrameHeader goodbye;
    goodbye.type = FrameType::kGoodbye;
    for (auto& link : links_) {
      if (link == nullptr) continue;
      if (link->sender->PostFrame(goodbye, {}).ok()) {
        link->sender->ShutdownWhenFlushed();
      }
    }
    {
      const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
      absl::MutexLock lock(&eof_mu_);
      while (open_links_ > 0) {
        if (eof_cv_.WaitWithDeadline(&eof_mu_, deadline)) break;
      }
    }
    stopping_.store(true, std::memory_order_relaxed);
    Wake();
    io_.join();
  }
  inbox()->Shutdown();
  const absl::Status why = absl::FailedPreconditionError(
      absl::StrCat(PeerName(rank()), " shut its transport down"));
  for (auto& link : links_) {
    if (link == nullptr) continue;
    link->sender->Fail(why);
    link->receiver->Abandon();
  }
}

void ShmTransport::Wake() { DoorbellRing(&own_->header()->doorbell); }

void ShmTransport::MarkEof() {
  absl::MutexLock lock(&eof_mu_);
  --open_links_;
  eof_cv_.SignalAll();
}

void ShmTransport::Loop() {
  absl::Time next_check = absl::Now() + options_.liveness_interval;
  DoorbellLoop(
      &own_->header()->doorbell, stopping_, kIdleSpins,
      options_.liveness_interval,
      [&] {
        const absl::Time now = absl::Now();
        if (now >= next_check) {
          CheckLiveness();
          next_check = now + options_.liveness_interval;
        }
      },
      [this] { return Poll(); });
}

bool ShmTransport::Poll() {
  const bool recheck = wake_pending_.exchange(false, std::memory_order_relaxed);
  bool progress = false;
  for (auto& link : links_) {
    if (link == nullptr) continue;
    const int peer = link->peer;
    const LinkService service =
        ServiceLink(link.get(), recheck, [&](const FrameReceiver::Result& r) {
          FailPeer(peer, r.error, r.send_error, r.orderly);
        });
    if (service.eof) MarkEof();
    progress |= service.progress;
  }
  return progress;
}

void ShmTransport::CheckLiveness() {
  for (auto& link : links_) {
    if (link == nullptr || link->eof) continue;
    if (ProcessIsDead(link->pid)) {
      FailPeer(link->peer,
               absl::UnavailableError(
                   absl::StrCat(link->name, " died (pid ", link->pid, ")")),
               false, false);
      link->receiver->Abandon();
      link->eof = true;
      MarkEof();
    }
  }
}

void ShmTransport::FailPeer(int peer, const absl::Status& why, bool send_error,
                            bool orderly) {
  const bool first = inbox()->FailPeer(peer, why);
  const absl::Status sticky = first ? why : inbox()->PeerStatus(peer);
  RingLink* link = links_[peer].get();
  if (first) LogPeerFailure(peer, sticky, orderly);
  link->sender->Fail(sticky, send_error ? std::string(sticky.message()) : "");
  link->dead.store(true, std::memory_order_release);
  Wake();
}

void ShmTransport::PostWrite(int peer, absl::Span<const std::byte> data,
                             RegionId remote, uint64_t remote_offset_bytes,
                             uint32_t imm, Completion* done) {
  absl::Status status =
      links_[peer]->PostWrite(data, remote, remote_offset_bytes, imm, done);
  if (!status.ok()) FailPeer(peer, status, false, false);
}

absl::Status ShmTransport::PostControlThenWrite(
    int peer, const FrameHeader& control, std::vector<std::byte> message,
    absl::Span<const std::byte> data, RegionId remote,
    uint64_t remote_offset_bytes, uint32_t imm, Completion* done) {
  return links_[peer]->PostControlThenWrite(control, std::move(message), data,
                                            remote, remote_offset_bytes, imm,
                                            done);
}

absl::Status ShmTransport::PostControl(int peer, const FrameHeader& header,
                                       std::vector<std::byte> message) {
  return links_[peer]->sender->PostFrame(header, std::move(message));
}

}  // namespace shm
}  // namespace transport
}  // namespace starling
