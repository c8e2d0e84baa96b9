#include "server/transport/fault_injection/faulty_transport.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {
namespace {

// Added to a corrupted write's offset: past the end of any real region.
constexpr uint64_t kCorruptOffsetBytes = uint64_t{1} << 50;

}  // namespace

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> base)
    : ForwardingTransport(base.get()), base_(std::move(base)) {
  STARLING_CHECK(base_ != nullptr);
  {
    absl::MutexLock lock(&mu_);
    faults_.resize(base_->size());
  }
  timer_ = std::thread([this] { TimerLoop(); });
}

FaultyTransport::~FaultyTransport() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  timer_.join();
}

void FaultyTransport::DropWrites(int peer, int count) {
  absl::MutexLock lock(&mu_);
  faults_.at(peer).drop_writes += count;
}

void FaultyTransport::DelayWrites(int peer, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  faults_.at(peer).delay = delay;
}

void FaultyTransport::CorruptNextWrite(int peer) {
  absl::MutexLock lock(&mu_);
  faults_.at(peer).corrupt_next = true;
}

void FaultyTransport::DropControl(int peer, int count) {
  absl::MutexLock lock(&mu_);
  faults_.at(peer).drop_control += count;
}

void FaultyTransport::ClosePeer(int peer) {
  base_->AbortPeer(peer, absl::UnavailableError(absl::StrCat(
                             "fault injection closed the connection to ",
                             base_->PeerName(peer))));
}

void FaultyTransport::Write(int peer, absl::Span<const std::byte> data,
                            RegionId remote, uint64_t remote_offset_bytes,
                            uint32_t imm, Completion* done) {
  if (peer >= 0 && peer < size()) {
    absl::MutexLock lock(&mu_);
    PeerFaults& faults = faults_[peer];
    if (faults.drop_writes > 0) {
      --faults.drop_writes;
      done->Add(1);
      done->Finish(absl::OkStatus());
      return;
    }
    if (faults.corrupt_next) {
      faults.corrupt_next = false;
      remote_offset_bytes += kCorruptOffsetBytes;
    }
    if (faults.delay > absl::ZeroDuration()) {
      // Counted now, as Write() promises; Post() hands it to the base.
      done->Add(1);
      delayed_.push_back(DelayedWrite{absl::Now() + faults.delay, peer, data,
                                      remote, remote_offset_bytes, imm, done});
      return;
    }
  }
  base_->Write(peer, data, remote, remote_offset_bytes, imm, done);
}

void FaultyTransport::Post(const DelayedWrite& write) {
  base_->Write(write.peer, write.data, write.remote, write.offset, write.imm,
               write.done);
  write.done->Finish(absl::OkStatus());  // the wrapper's own count
}

void FaultyTransport::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    const absl::Time now = absl::Now();
    std::vector<DelayedWrite> due;
    absl::Time next = absl::InfiniteFuture();
    for (auto it = delayed_.begin(); it != delayed_.end();) {
      if (it->due <= now || stopping_) {
        due.push_back(*it);
        it = delayed_.erase(it);
      } else {
        next = std::min(next, it->due);
        ++it;
      }
    }
    if (!due.empty()) {
      mu_.Unlock();
      for (const DelayedWrite& write : due) Post(write);
      mu_.Lock();
      continue;
    }
    if (stopping_) return;
    auto wake = [this, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || absl::Now() >= next ||
             std::any_of(
                 delayed_.begin(), delayed_.end(),
                 [next](const DelayedWrite& w) { return w.due < next; });
    };
    mu_.AwaitWithDeadline(absl::Condition(&wake), next);
  }
}

absl::Status FaultyTransport::SendControl(int peer, uint32_t tag,
                                          absl::Span<const std::byte> message) {
  if (peer >= 0 && peer < size()) {
    absl::MutexLock lock(&mu_);
    if (faults_[peer].drop_control > 0) {
      --faults_[peer].drop_control;
      return absl::OkStatus();
    }
  }
  return base_->SendControl(peer, tag, message);
}

}  // namespace transport
}  // namespace starling
