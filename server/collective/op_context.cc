#include "server/collective/op_context.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/collective/reduce_kernels.h"
#include "server/collective/shard_layout.h"
#include "server/transport/await_writes.h"

namespace starling {
namespace collective {

transport::RegionId OpRegionId(uint64_t seq, Region region) {
  return (uint64_t{1} << 63) | ((seq & (kOpSeqLimit - 1)) << 2) |
         static_cast<uint64_t>(region);
}

transport::RegionId OpRegionIdsBegin(uint64_t seq) {
  // Region values are 1 and 2, inside [seq << 2, (seq + 1) << 2).
  return (uint64_t{1} << 63) | (std::min(seq, kOpSeqLimit) << 2);
}

namespace {

// Ops whose result does not depend on every rank's data (a broadcast root,
// a shift's ranks), that are nothing but the exchange (a barrier, an empty
// buffer), or in which some rank may send no data (a reduce-scatter or
// all-gather of fewer elements than ranks leaves some blocks empty; an
// all-reduce of any element needs every rank's, so every rank writes):
// every rank sends its descriptor to every peer and checks all of them. The
// same call gives the same answer on every rank.
bool ExchangesWithEveryPeer(const OpDescriptor& desc, int size) {
  return desc.kind == OpKind::kBroadcast || desc.kind == OpKind::kBarrier ||
         desc.kind == OpKind::kShift || desc.count == 0 ||
         (desc.kind != OpKind::kAllReduce &&
          desc.count < static_cast<uint64_t>(size));
}

}  // namespace

OpContext::OpContext(
    transport::Transport* transport, DescriptorInbox* descriptors,
    DescriptorInbox* notices, const OpDescriptor& desc, absl::Duration timeout,
    absl::Span<std::byte> data, absl::Span<std::byte> scratch,
    size_t chunk_bytes, size_t doubling_max_bytes,
    std::vector<std::unique_ptr<transport::Completion>>* completions,
    const Cancellation* cancel, CollectiveObserver* observer)
    : transport_(transport),
      descriptor_inbox_(descriptors),
      notice_inbox_(notices),
      desc_(desc),
      every_peer_(ExchangesWithEveryPeer(desc, transport->size())),
      rank_(transport->rank()),
      size_(transport->size()),
      timeout_(timeout),
      deadline_(absl::Now() + timeout),
      data_(data),
      scratch_(scratch),
      element_bytes_(DataTypeBytes(desc.dtype)),
      planner_(element_bytes_, chunk_bytes),
      doubling_max_bytes_(doubling_max_bytes),
      completions_(completions),
      cancel_(cancel),
      observer_(observer),
      start_(absl::Now()),
      wrote_to_(size_, false),
      sent_to_(size_, false),
      told_(size_, false),
      matched_(size_, false),
      descriptors_(size_),
      arrived_at_(size_, absl::InfiniteFuture()) {
  arrived_at_[rank_] = start_;
}

absl::Time OpContext::WaitSlice() const {
  if (cancel_ == nullptr) return deadline_;
  return std::min(deadline_, absl::Now() + kCancellationPollInterval);
}

absl::Status OpContext::CancelledStatus() const {
  if (cancel_ == nullptr || !cancel_->cancelled()) return absl::OkStatus();
  const absl::Status why = cancel_->status();
  return absl::Status(why.code(),
                      absl::StrCat(Where(), " cancelled: ", why.message()));
}

void OpContext::SetStep(absl::string_view phase, int step, int steps) {
  phase_ = std::string(phase);
  step_ = step;
  steps_ = steps;
}

std::string OpContext::Where() const {
  std::string step;
  if (steps_ > 0) step = absl::StrCat(" step ", step_, " of ", steps_);
  return absl::StrCat(OpKindName(desc_.kind), " op ", desc_.seq, " (",
                      AlgorithmName(desc_.algorithm), ", ", phase_, step, ")");
}

absl::Status OpContext::Start() {
  if (!data_.empty()) {
    absl::Status s =
        transport_->RegisterRegion(OpRegionId(desc_.seq, Region::kData), data_);
    if (!s.ok()) return Annotate(s, Where() + ": registering the data buffer");
    data_registered_ = true;
  }
  if (!scratch_.empty()) {
    absl::Status s = transport_->RegisterRegion(
        OpRegionId(desc_.seq, Region::kScratch), scratch_);
    if (!s.ok()) return Annotate(s, Where() + ": registering scratch");
    scratch_registered_ = true;
  }
  // Descriptors already waiting: those peers were here before this rank.
  PollDescriptors(start_);
  return absl::OkStatus();
}

void OpContext::SendDescriptor(int peer) {
  if (sent_to_[peer]) return;
  const auto wire = desc_.Encode();
  DescriptorSent(peer, transport_->SendControl(peer, kOpDescriptorTag,
                                               absl::MakeConstSpan(wire)));
}

void OpContext::DescriptorSent(int peer, const absl::Status& sent) {
  sent_to_[peer] = true;
  told_[peer] = true;
  if (!sent.ok() && peers_status_.ok()) {
    peers_status_ = PeerError(peer, sent, "sending the op descriptor");
  }
}

void OpContext::SendNotice(int peer, bool waiting) {
  told_[peer] = true;
  OpDescriptor mine = desc_;
  mine.waiting = waiting;
  const auto wire = mine.Encode();
  // Only the arrival view depends on it: a lost peer fails the op elsewhere.
  transport_->SendControl(peer, kOpNoticeTag, absl::MakeConstSpan(wire))
      .IgnoreError();
}

void OpContext::Announce() {
  // Called before every chunk of ops that exchange with every peer: the
  // loop runs once.
  if (announced_) return;
  announced_ = true;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) SendDescriptor(peer);
  }
}

void OpContext::StartWaiting() {
  if (waiting_) return;
  waiting_ = true;
  // Every peer not heard from yet hears that we wait, and answers; those
  // that have our descriptor already get the notice too, since some (a
  // ring's successor) never send us theirs.
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_ && arrived_at_[peer] == absl::InfiniteFuture()) {
      SendNotice(peer, /*waiting=*/true);
    }
  }
}

void OpContext::NoteArrival(int peer, absl::Time when) {
  if (arrived_at_[peer] != absl::InfiniteFuture()) return;
  arrived_at_[peer] = when;
  if (observer_ != nullptr) observer_->PeerArrived(desc_.seq, peer, when);
}

absl::StatusOr<bool> OpContext::TakeDescriptor(int peer, absl::Time when) {
  if (!descriptors_[peer].empty()) return true;
  absl::StatusOr<std::optional<std::vector<std::byte>>> wire =
      descriptor_inbox_->Take(peer, desc_.seq, absl::InfinitePast());
  if (!wire.ok()) return wire.status();
  if (!wire->has_value()) return false;
  KeepDescriptor(peer, **std::move(wire), when);
  return true;
}

void OpContext::KeepDescriptor(int peer, std::vector<std::byte> wire,
                               absl::Time when) {
  if (wire.empty()) wire.resize(1);  // Decode rejects it; "taken"
  descriptors_[peer] = std::move(wire);
  NoteArrival(peer, when);
}

void OpContext::TakeNotices(int peer, absl::Time when) {
  // Notices are wanted while the peer has not been heard from, or may be
  // waiting for word from us.
  while (arrived_at_[peer] == absl::InfiniteFuture() || !told_[peer]) {
    absl::StatusOr<std::optional<std::vector<std::byte>>> wire =
        notice_inbox_->Take(peer, desc_.seq, absl::InfinitePast());
    if (!wire.ok() || !wire->has_value()) return;
    NoteArrival(peer, when);
    absl::StatusOr<OpDescriptor> notice = OpDescriptor::Decode(**wire);
    // A peer that waits wants to hear that we are here.
    if (notice.ok() && notice->waiting && !told_[peer]) {
      SendNotice(peer, /*waiting=*/false);
    }
  }
}

void OpContext::PollDescriptors(absl::Time when) {
  next_poll_ = when + kArrivalPollInterval;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    // A look, not a wait: a peer that is gone fails this op only through a
    // wait that needs it (its data, or its descriptor after its data). One
    // that finished this op and shut down before we looked, as ranks that
    // exchange no data with us may, has not failed anything.
    if (TakeDescriptor(peer, when).ok()) TakeNotices(peer, when);
  }
}

std::string OpContext::MissingRanksText() const {
  std::vector<std::string> missing;
  for (int peer = 0; peer < size_; ++peer) {
    if (arrived_at_[peer] == absl::InfiniteFuture()) {
      missing.push_back(transport_->PeerName(peer));
    }
  }
  if (missing.empty()) return "";
  return absl::StrCat("; ", absl::StrJoin(missing, ", "),
                      missing.size() == 1 ? " has" : " have",
                      " not arrived at this op");
}

ArrivalSummary OpContext::arrival() const {
  ArrivalSummary summary;
  if (size_ < 2) return summary;
  absl::Time last = start_;
  int last_rank = rank_;
  bool everyone = true;
  for (int peer = 0; peer < size_; ++peer) {
    if (arrived_at_[peer] == absl::InfiniteFuture()) {
      everyone = false;
    } else if (arrived_at_[peer] > last) {
      last = arrived_at_[peer];
      last_rank = peer;
    }
  }
  // An op that succeeded had every rank; those not heard from sent nothing
  // here because no wait of theirs or ours lasted kArrivalPollInterval.
  if (!everyone && !succeeded_) return summary;
  summary.last_rank = last_rank;
  summary.skew = last - start_;
  return summary;
}

absl::Status OpContext::AwaitDescriptor(int peer) {
  // Waits in short slices: after each the other peers' descriptors are
  // taken if they came meanwhile, so that their arrival times (and the
  // observer's view of who is missing) stay current while one slow rank
  // holds the op; after the first, every peer is told that we wait.
  while (descriptors_[peer].empty()) {
    const absl::Time slice =
        std::min(WaitSlice(), absl::Now() + kArrivalPollInterval);
    absl::StatusOr<std::optional<std::vector<std::byte>>> wire =
        descriptor_inbox_->Take(peer, desc_.seq, slice);
    const absl::Time now = absl::Now();
    if (!wire.ok()) return PeerError(peer, wire.status(), "no op descriptor");
    if (wire->has_value()) {
      KeepDescriptor(peer, **std::move(wire), now);
      break;
    }
    StartWaiting();
    PollDescriptors(now);
    if (!descriptors_[peer].empty()) break;  // it came just now
    if (now >= deadline_) return DescriptorTimeout(peer);
    STARLING_RETURN_IF_ERROR(CancelledStatus());
  }
  return absl::OkStatus();
}

absl::Status OpContext::DescriptorTimeout(int peer) {
  const absl::Status timeout = PeerError(
      peer, absl::DeadlineExceededError("op deadline"), "no op descriptor");
  return absl::Status(timeout.code(),
                      absl::StrCat(timeout.message(), MissingRanksText()));
}

int OpContext::FirstMissingPeer() const {
  for (int peer = 0; peer < size_; ++peer) {
    if (arrived_at_[peer] == absl::InfiniteFuture()) return peer;
  }
  return -1;
}

absl::Status OpContext::MatchArrived(bool only_if_due) {
  if (!peers_status_.ok() || matched_count_ == size_ - 1) return peers_status_;
  const absl::Time now = absl::Now();
  if (!only_if_due || now >= next_poll_) PollDescriptors(now);
  for (int peer = 0; peer < size_ && peers_status_.ok(); ++peer) {
    if (peer != rank_ && !descriptors_[peer].empty()) {
      peers_status_ = MatchDescriptor(peer);
    }
  }
  return peers_status_;
}

absl::Status OpContext::MatchDescriptor(int peer) {
  if (matched_[peer]) return absl::OkStatus();
  absl::StatusOr<OpDescriptor> theirs =
      OpDescriptor::Decode(descriptors_[peer]);
  if (!theirs.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(), ": ", transport_->PeerName(peer), " sent ",
                     theirs.status().message()));
  }
  if (!theirs->Matches(desc_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(OpKindName(desc_.kind), " op ", desc_.seq,
                     ": mismatched collective calls: rank ", rank_, " called ",
                     desc_.ToString(), " but ", transport_->PeerName(peer),
                     " called ", theirs->ToString(), " as op ", theirs->seq));
  }
  matched_[peer] = true;
  ++matched_count_;
  return absl::OkStatus();
}

absl::Status OpContext::CheckPeer(int peer) {
  if (!peers_status_.ok() || matched_[peer]) return peers_status_;
  const std::string saved_phase = phase_;
  const int saved_step = step_, saved_steps = steps_;
  SetStep("handshake", 0, 0);
  peers_status_ = AwaitDescriptor(peer);
  if (peers_status_.ok()) peers_status_ = MatchDescriptor(peer);
  SetStep(saved_phase, saved_step, saved_steps);
  return peers_status_;
}

absl::Status OpContext::CheckPeers() {
  Announce();
  // Every descriptor is awaited (in rank order) before any is compared, so
  // that a mismatch is reported the same way on every rank.
  const std::string saved_phase = phase_;
  const int saved_step = step_, saved_steps = steps_;
  SetStep("handshake", 0, 0);
  for (int peer = 0; peer < size_ && peers_status_.ok(); ++peer) {
    if (peer != rank_) peers_status_ = AwaitDescriptor(peer);
  }
  SetStep(saved_phase, saved_step, saved_steps);
  for (int peer = 0; peer < size_ && peers_status_.ok(); ++peer) {
    if (peer != rank_) peers_status_ = MatchDescriptor(peer);
  }
  return peers_status_;
}

absl::Status OpContext::GatherBlocksToRankZero(int step) {
  const ShardLayout layout(desc_.count, size_);
  const size_t e = element_bytes_;
  SetStep("gather", 1, 1);
  if (rank_ != 0) {
    PostChunks(0,
               data_.subspan(layout.Begin(rank_) * e, layout.Size(rank_) * e),
               Region::kData, layout.Begin(rank_) * e, step);
    return absl::OkStatus();
  }
  for (int peer = 1; peer < size_; ++peer) {
    const size_t chunks = planner_.NumChunks(layout.Size(peer) * e);
    for (size_t k = 0; k < chunks; ++k) {
      STARLING_RETURN_IF_ERROR(WaitChunk(peer, Region::kData, step, k));
    }
  }
  return absl::OkStatus();
}

void OpContext::PostChunks(int peer, absl::Span<const std::byte> src,
                           Region dst, size_t dst_offset, int step,
                           size_t first_chunk) {
  const size_t chunks = planner_.NumChunks(src.size());
  for (size_t k = 0; k < chunks; ++k) {
    const Chunk chunk = planner_.Get(src.size(), k);
    PostChunk(peer, src.subspan(chunk.offset_bytes, chunk.length_bytes), dst,
              dst_offset + chunk.offset_bytes, step, first_chunk + k);
  }
}

void OpContext::PostChunk(int peer, absl::Span<const std::byte> src, Region dst,
                          size_t dst_offset, int step, size_t chunk) {
  if (src.empty()) return;
  wrote_to_[peer] = true;
  const transport::RegionId region = OpRegionId(desc_.seq, dst);
  const uint32_t imm = StepImm(step, chunk);
  transport::Completion* done = (*completions_)[peer].get();
  if (every_peer_ || sent_to_[peer]) {
    transport_->Write(peer, src, region, dst_offset, imm, done);
    // After the op's first write, so that the descriptors' sends to every
    // peer are not on its critical path.
    if (every_peer_) Announce();
    return;
  }
  // The descriptor travels with the first write to the peer: on a stream
  // both leave in one system call, and the receiver, which uses the data
  // only once it has checked the descriptor, finds it there when the write
  // lands instead of waking a second time for it.
  const auto wire = desc_.Encode();
  DescriptorSent(peer, transport_->SendControlThenWrite(
                           peer, kOpDescriptorTag, absl::MakeConstSpan(wire),
                           src, region, dst_offset, imm, done));
}

absl::Status OpContext::WaitChunk(int peer, Region region, int step,
                                  size_t chunk) {
  if (every_peer_) Announce();
  transport::WriteMatch match;
  match.region = OpRegionId(desc_.seq, region);
  match.peer = peer;
  match.imm = StepImm(step, chunk);
  absl::StatusOr<transport::WriteNotice> notice;
  while (true) {
    // Until every peer's descriptor has come and matched, the wait runs in
    // short slices that take and compare those that came meanwhile (at most
    // every kArrivalPollInterval): a mismatched call anywhere that reaches
    // this rank fails this op within one slice, and the arrival times stay
    // current.
    STARLING_RETURN_IF_ERROR(MatchArrived(/*only_if_due=*/true));
    const bool all_matched = matched_count_ == size_ - 1;
    notice = transport_->WaitForWrite(
        match, all_matched
                   ? WaitSlice()
                   : std::min(WaitSlice(), absl::Now() + kArrivalPollInterval));
    if (!absl::IsDeadlineExceeded(notice.status())) break;
    // This wait is long: every rank hears that we are here and answers.
    StartWaiting();
    if (absl::Now() >= deadline_) {
      STARLING_RETURN_IF_ERROR(MatchArrived());
      // A rank that never came is the one to blame (and to abort), not the
      // partner that waits for it too; the partner itself, if it never came.
      if (arrived_at_[peer] == absl::InfiniteFuture()) {
        return DescriptorTimeout(peer);
      }
      const int missing = FirstMissingPeer();
      if (missing >= 0) return DescriptorTimeout(missing);
      return PeerError(peer, notice.status(), "no data");
    }
    if (absl::Status c = CancelledStatus(); !c.ok()) return c;
  }
  if (!notice.ok()) return PeerError(peer, notice.status(), "no data");
  // The data is used only once its sender's call is known to be this one
  // (its descriptor follows its first write on the same connection).
  return CheckPeer(peer);
}

absl::Status OpContext::PeerError(int peer, const absl::Status& status,
                                  absl::string_view waiting_for) {
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    absl::Status timeout = absl::DeadlineExceededError(absl::StrCat(
        Where(), ": ", waiting_for, " from ", transport_->PeerName(peer),
        " within ", absl::FormatDuration(timeout_)));
    // Closing the peer finishes our writes to it, so the caller's buffer is
    // free once we return.
    transport_->AbortPeer(peer, timeout);
    return timeout;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(Where(), ": ", waiting_for, " from ",
                   transport_->PeerName(peer), ": ", status.message()));
}

absl::Status OpContext::ReduceChunkFromScratch(int peer, int step, size_t slot,
                                               size_t k, const Chunk& c) {
  STARLING_RETURN_IF_ERROR(WaitChunk(peer, Region::kScratch, step, k));
  return ReduceInto(
      data_.subspan(c.offset_bytes, c.length_bytes),
      scratch_.subspan(slot * data_.size() + c.offset_bytes, c.length_bytes));
}

absl::Status OpContext::ReduceInto(absl::Span<std::byte> inout,
                                   absl::Span<const std::byte> in) const {
  absl::Status s = Reduce(desc_.dtype, desc_.op, inout, in);
  if (!s.ok()) return Annotate(s, Where());
  return s;
}

absl::Status OpContext::AverageIfNeeded(absl::Span<std::byte> data) const {
  if (desc_.op != ReduceOp::kAverage) return absl::OkStatus();
  absl::Status s = FinishAverage(desc_.dtype, data, size_);
  if (!s.ok()) return Annotate(s, Where());
  return s;
}

bool OpContext::WritesPendingTo(int peer) const {
  return wrote_to_[peer] && (*completions_)[peer]->pending() > 0;
}

absl::Status OpContext::AwaitWritesTo(int peer) {
  if (!wrote_to_[peer]) return absl::OkStatus();
  std::unique_ptr<transport::Completion>& done = (*completions_)[peer];
  const absl::Status written = transport::AwaitWritesOrAbortPeer(
      *transport_, peer, *done, deadline_, [&] {
        return absl::DeadlineExceededError(absl::StrCat(
            Where(), ": writes to ", transport_->PeerName(peer),
            " not finished within ", absl::FormatDuration(timeout_)));
      });
  if (!written.ok()) {
    // A Completion keeps its first error forever: start afresh.
    done = std::make_unique<transport::Completion>();
    return Annotate(written, absl::StrCat(Where(), ": writing to ",
                                          transport_->PeerName(peer)));
  }
  return absl::OkStatus();
}

absl::Status OpContext::Finish(absl::Status status) {
  if (status.ok() && (every_peer_ || !SentAny())) {
    // Every peer's descriptor is checked even by ranks that only sent (a
    // broadcast root), or exchanged no data at all (an empty buffer), so
    // that a mismatch is reported on every rank.
    status = CheckPeers();
  } else if (status.ok()) {
    // Every peer whose data this rank used has been checked; descriptors
    // from the others that are here are compared too.
    status = MatchArrived();
  }
  // A rank whose op failed tells every peer that it came and with what
  // call, so that ranks stalled on it see the mismatch (or that it is here)
  // within a slice instead of timing out.
  if (!status.ok()) Announce();
  // A failed op waits only until the deadline, then aborts the peer so its
  // pending writes finish before we return.
  for (int peer = 0; peer < size_; ++peer) {
    absl::Status written = AwaitWritesTo(peer);
    if (!written.ok() && status.ok()) status = written;
  }
  if (data_registered_) {
    // NotFound cannot happen (we registered it); nothing to do either way.
    transport_->DeregisterRegion(OpRegionId(desc_.seq, Region::kData))
        .IgnoreError();
  }
  if (scratch_registered_) {
    transport_->DeregisterRegion(OpRegionId(desc_.seq, Region::kScratch))
        .IgnoreError();
  }
  succeeded_ = status.ok();
  return status;
}

bool OpContext::SentAny() const {
  for (int peer = 0; peer < size_; ++peer) {
    if (sent_to_[peer]) return true;
  }
  return false;
}

}  // namespace collective
}  // namespace starling
