// OpContext: the state of one running collective op on one rank, and the
// primitives every algorithm is written with.
//
// Terms used by the algorithm files:
//   region  - the op's two registered buffers on each rank: kData (the
//             caller's buffer, in place) and kScratch (the Communicator's
//             reusable receive buffer). Their RegionIds derive from the op
//             sequence number, so a late write of op k can never land in
//             op k+1: it finds no registration and is held by the
//             transport until the Communicator retires op k's ids, then
//             dropped and counted (CommunicatorOptions::
//             retire_stale_regions; without it, held for good).
//   step    - one exchange of an algorithm, numbered per op; a write's
//             immediate value is (step << 16) | chunk.
//   chunk   - a ChunkPlanner piece of a step's byte range. All chunks of a
//             step are posted at once; the receiver consumes (reduces) chunk
//             k as soon as it lands while later chunks are still in flight.
//
// Start() registers the regions and takes the descriptors already here.
// Descriptors (one control tag, sorted per sender by DescriptorInbox) go
// only where data goes: an op's descriptor travels to a peer with the op's
// first write to it (Transport::SendControlThenWrite: on a stream, one
// system call, and the receiver finds it when the write lands instead of
// waking again for it), so the 56 messages of an all-to-all exchange at 8
// ranks become none of their own. Data from a peer is consumed only once that
// peer's descriptor has been checked (each wait checks the peer it waits for),
// so a rank's result holds only data from ranks that made its call; a rank that
// sees a mismatch fails with InvalidArgument naming both calls and, as every
// rank whose op fails, sends its descriptor to every peer, so that the ranks
// stalled on it fail the same way within a slice instead of timing out.
// Broadcast, shift and barrier, whose result does not need every rank's
// data, and ops in which a rank may exchange no data (an empty buffer; a
// reduce-scatter or all-gather of fewer elements than ranks) keep the full
// exchange: Finish() awaits and checks every peer's descriptor.
//
// While a wait runs, it takes the descriptors that came meanwhile every
// kArrivalPollInterval, noting when each peer was first heard from (told to
// the CollectiveObserver, if any, as it happens). A wait that lasts longer
// than that sends an arrival notice (this rank's descriptor flagged
// `waiting`, on its own tag, kOpNoticeTag) to every peer not heard from; a
// peer in (or later starting) the op that has not told this rank yet
// answers with a notice. Notices only say who is there; they are never
// compared, so one that arrives after its op has ended (a peer had finished)
// can make no later op fail. So a stuck op says which ranks it has not
// heard from, and the op's ArrivalSummary names the rank that came last
// whenever someone waited long enough to matter (in a fast op, the last of
// the ranks heard from). Every wait runs against the op
// deadline; a peer silent past it is named in a DeadlineExceeded error and
// aborted (Transport::AbortPeer) so that no posted write still references the
// caller's buffer when the op returns. Finish() waits for this op's writes,
// deregisters and returns the op's final status.
//
// Thread-compatible: used by the one thread running the op.
#ifndef STARLING_SERVER_COLLECTIVE_OP_CONTEXT_H_
#define STARLING_SERVER_COLLECTIVE_OP_CONTEXT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/collective/cancellation.h"
#include "server/collective/chunk_planner.h"
#include "server/collective/collective_observer.h"
#include "server/collective/descriptor_inbox.h"
#include "server/collective/op_descriptor.h"
#include "server/transport/completion.h"
#include "server/transport/transport.h"

namespace starling {
namespace collective {

enum class Region : uint8_t { kData = 1, kScratch = 2 };

// RegionIds of op `seq`. Collective regions have the top bit of the id set,
// so other users of the same transport can use ids below 2^63 (and tags
// below 2^31: descriptor_inbox.h).
transport::RegionId OpRegionId(uint64_t seq, Region region);

// Op sequence numbers are taken modulo kOpSeqLimit in RegionIds.
inline constexpr uint64_t kOpSeqLimit = uint64_t{1} << 60;

// The RegionIds of ops [a, b) are [OpRegionIdsBegin(a), OpRegionIdsBegin(b)),
// for a <= b <= kOpSeqLimit; a larger argument counts as kOpSeqLimit.
transport::RegionId OpRegionIdsBegin(uint64_t seq);

// A write's immediate value for chunk `chunk` of step `step`.
// REQUIRES: step < 2^16, chunk < 2^16.
inline uint32_t StepImm(int step, size_t chunk) {
  return (static_cast<uint32_t>(step) << 16) | static_cast<uint32_t>(chunk);
}

class OpContext {
 public:
  // `transport`, `descriptors` and `notices` (the transport's inboxes of
  // kOpDescriptorTag and kOpNoticeTag, for every op) and `completions` (one
  // per rank), owned by the Communicator and reused across ops, are borrowed
  // for the op's life; `data` and `scratch` must stay valid until Finish()
  // returns.
  OpContext(transport::Transport* transport, DescriptorInbox* descriptors,
            DescriptorInbox* notices, const OpDescriptor& desc,
            absl::Duration timeout, absl::Span<std::byte> data,
            absl::Span<std::byte> scratch, size_t chunk_bytes,
            size_t doubling_max_bytes,
            std::vector<std::unique_ptr<transport::Completion>>* completions,
            const Cancellation* cancel = nullptr,
            CollectiveObserver* observer = nullptr);
  OpContext(const OpContext&) = delete;
  OpContext& operator=(const OpContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const OpDescriptor& desc() const { return desc_; }
  size_t element_bytes() const { return element_bytes_; }
  absl::Span<std::byte> data() const { return data_; }
  absl::Span<std::byte> scratch() const { return scratch_; }
  const ChunkPlanner& planner() const { return planner_; }
  // SelectorOptions::doubling_max_bytes of the communicator.
  size_t doubling_max_bytes() const { return doubling_max_bytes_; }

  // Names the current step in error messages: "reduce-scatter step 2 of 3".
  void SetStep(absl::string_view phase, int step, int steps);

  // Registers the regions and takes the descriptors already here.
  absl::Status Start();

  // Posts all chunks of `src` to `peer`'s region `dst` at `dst_offset`;
  // chunk k carries StepImm(step, first_chunk + k).
  void PostChunks(int peer, absl::Span<const std::byte> src, Region dst,
                  size_t dst_offset, int step, size_t first_chunk = 0);
  // Posts one already-cut chunk.
  void PostChunk(int peer, absl::Span<const std::byte> src, Region dst,
                 size_t dst_offset, int step, size_t chunk);

  // Gathers every rank's block (ShardLayout of the op's count) of the data
  // region into rank 0's data region as the one "gather" step: each other
  // rank posts its block with step `step`; rank 0 waits for every chunk of
  // them. Errors as WaitChunk().
  absl::Status GatherBlocksToRankZero(int step);

  // Waits until chunk `chunk` of step `step` from `peer` has landed in this
  // rank's region `region`. Checks `peer`'s descriptor first if not yet
  // done. Errors carry the op, step and peer (and, on a timeout, the ranks
  // that have not arrived).
  absl::Status WaitChunk(int peer, Region region, int step, size_t chunk);

  // Waits for every chunk of a `range_bytes` range of step `step` from
  // `peer`, calling on_chunk(Chunk) -> absl::Status after each lands.
  template <typename OnChunk>
  absl::Status ReceiveChunks(int peer, Region region, size_t range_bytes,
                             int step, size_t first_chunk, OnChunk on_chunk);

  // Waits for chunk `k` of step `step` from `peer`, which wrote data()'s
  // chunk `c` into scratch slot `slot` (at slot * data().size() +
  // c.offset_bytes), and reduces it into data()'s chunk `c`.
  absl::Status ReduceChunkFromScratch(int peer, int step, size_t slot, size_t k,
                                      const Chunk& c);

  // inout = op(inout, in) with this op's dtype and reduce op.
  absl::Status ReduceInto(absl::Span<std::byte> inout,
                          absl::Span<const std::byte> in) const;
  // Divides by the group size if the op is kAverage; no-op otherwise.
  absl::Status AverageIfNeeded(absl::Span<std::byte> data) const;

  // Waits until every write this op posted to `peer` has left its buffer
  // (the buffer may be written again). At the op deadline the peer is
  // aborted and a DeadlineExceeded error naming it returned.
  absl::Status AwaitWritesTo(int peer);
  // Whether a write this op posted to `peer` has not left its buffer yet
  // (AwaitWritesTo would wait). Does not block.
  bool WritesPendingTo(int peer) const;

  // Sends this op's descriptor to every peer, receives and checks every
  // peer's.
  absl::Status CheckPeers();

  // Ends the op: waits for this op's writes (aborting peers whose writes are
  // still pending at the deadline), deregisters the regions and returns
  // `status`, or the first write error if `status` is ok.
  absl::Status Finish(absl::Status status);

  // "allreduce op 12 (butterfly, reduce-scatter step 2 of 3)".
  std::string Where() const;

  // When this op started here (the constructor).
  absl::Time start() const { return start_; }
  // Which rank arrived last and how long this rank waited for it (see
  // collective_observer.h): among the ranks heard from once the op has
  // succeeded; otherwise -1 until every peer has arrived.
  ArrivalSummary arrival() const;

  // How often a wait looks whether other peers' descriptors have come
  // meanwhile (their arrival times are exact to within this), and how long
  // a wait lasts before every peer is told that this rank waits.
  static constexpr absl::Duration kArrivalPollInterval = absl::Milliseconds(5);

 private:
  absl::Status PeerError(int peer, const absl::Status& status,
                         absl::string_view waiting_for);
  // Sends this op's descriptor to `peer` unless it was sent there already;
  // a failed send becomes the op's peer status.
  void SendDescriptor(int peer);
  // Notes that this op's descriptor went to `peer` (with `sent` the send's
  // status, which becomes the op's peer status if it failed).
  void DescriptorSent(int peer, const absl::Status& sent);
  // SendDescriptor() to every peer.
  void Announce();
  // Sends an arrival notice (this op's descriptor flagged `waiting` or not,
  // on kOpNoticeTag) to `peer`. Errors are left to the op's other waits.
  void SendNotice(int peer, bool waiting);
  // A wait has lasted kArrivalPollInterval: sends a waiting notice to every
  // peer not heard from. Once.
  void StartWaiting();
  // Whether this op sent its descriptor to any peer.
  bool SentAny() const;
  // `peer` was first heard from at `when` (descriptor or notice).
  void NoteArrival(int peer, absl::Time when);
  // Keeps `peer`'s descriptor `wire`, seen at `when`.
  void KeepDescriptor(int peer, std::vector<std::byte> wire, absl::Time when);
  // Takes `peer`'s notices that are here, noting its arrival and answering
  // one that waits; stops at a lost peer (left to the waits that need it).
  void TakeNotices(int peer, absl::Time when);
  // Waits for `peer`'s descriptor (to the op deadline).
  absl::Status AwaitDescriptor(int peer);
  // InvalidArgument if `peer`'s descriptor (here already) is not this op's
  // call; notes a match, once.
  absl::Status MatchDescriptor(int peer);
  // AwaitDescriptor() and MatchDescriptor() for one peer, once.
  absl::Status CheckPeer(int peer);
  // Takes the descriptors that came (no wait; with `only_if_due`, only if
  // kArrivalPollInterval has passed since the last look) and matches them.
  absl::Status MatchArrived(bool only_if_due = false);
  // The lowest peer whose descriptor has not come; -1 if none.
  int FirstMissingPeer() const;
  // DeadlineExceeded for `peer`'s descriptor (aborting it), naming every
  // rank that has not arrived.
  absl::Status DescriptorTimeout(int peer);
  // Takes `peer`'s descriptor if it is here already (no wait); notes its
  // arrival at `when`. Returns false if it is not here; an error if the
  // peer is lost.
  absl::StatusOr<bool> TakeDescriptor(int peer, absl::Time when);
  // TakeDescriptor() and TakeNotices() for every peer; a lost peer is left
  // to the waits that need it.
  void PollDescriptors(absl::Time when);
  // "; rank 2 (host:port), rank 3 (host:port) have not arrived at this op":
  // the peers whose descriptors are missing, for timeout messages.
  std::string MissingRanksText() const;
  // The next deadline a wait uses: the op deadline, or, when the op can be
  // cancelled, at most kCancellationPollInterval from now.
  absl::Time WaitSlice() const;
  // Non-ok (the cancellation's reason, annotated) once cancelled.
  absl::Status CancelledStatus() const;

  transport::Transport* const transport_;
  DescriptorInbox* const descriptor_inbox_;
  DescriptorInbox* const notice_inbox_;
  const OpDescriptor desc_;
  // Descriptors to and from every peer (ExchangesWithEveryPeer()).
  const bool every_peer_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const absl::Time deadline_;
  const absl::Span<std::byte> data_;
  const absl::Span<std::byte> scratch_;
  const size_t element_bytes_;
  const ChunkPlanner planner_;
  const size_t doubling_max_bytes_;
  std::vector<std::unique_ptr<transport::Completion>>* const completions_;
  const Cancellation* const cancel_;    // may be null
  CollectiveObserver* const observer_;  // may be null
  const absl::Time start_;

  std::vector<bool> wrote_to_;  // peers this op posted writes to
  bool data_registered_ = false;
  bool scratch_registered_ = false;
  bool announced_ = false;     // Announce() ran
  std::vector<bool> sent_to_;  // peers sent this op's descriptor
  std::vector<bool> told_;     // ... or a notice
  bool waiting_ = false;       // StartWaiting() ran
  bool succeeded_ = false;     // Finish() returned ok
  // When the next look at the descriptors that came is due.
  absl::Time next_poll_ = absl::InfinitePast();
  std::vector<bool> matched_;  // peers whose descriptor matched ours
  int matched_count_ = 0;
  // The first error of sending, receiving or matching descriptors; sticky.
  absl::Status peers_status_;
  // Per rank: the descriptor received (empty: not yet) and when the rank
  // was first heard from, by descriptor or notice (InfiniteFuture: not yet;
  // this rank's own entry is start_).
  std::vector<std::vector<std::byte>> descriptors_;
  std::vector<absl::Time> arrived_at_;
  std::string phase_ = "start";
  int step_ = 0;
  int steps_ = 0;
};

template <typename OnChunk>
absl::Status OpContext::ReceiveChunks(int peer, Region region,
                                      size_t range_bytes, int step,
                                      size_t first_chunk, OnChunk on_chunk) {
  const size_t chunks = planner_.NumChunks(range_bytes);
  for (size_t k = 0; k < chunks; ++k) {
    absl::Status status = WaitChunk(peer, region, step, first_chunk + k);
    if (!status.ok()) return status;
    status = on_chunk(planner_.Get(range_bytes, k));
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_OP_CONTEXT_H_
