// Communicator: the public entry to Starling's collectives over one
// Transport group.
//
//   ASSIGN_OR_RETURN(auto comm, Communicator::Create(transport));
//   RETURN_IF_ERROR(comm->AllReduce(AsWritableBytes(grad), DataType::kFloat32,
//                                   ReduceOp::kSum));
//
// Every rank must issue the same ops in the same order: each op takes the
// next sequence number, from which its RegionIds derive and which its
// descriptor carries, so late frames of op k can never land in op k+1 (a
// late descriptor is dropped: descriptor_inbox.h). All ops are in place on
// `data` (whole elements, any alignment) and return:
//   InvalidArgument   - bad arguments, or ranks made different calls (the
//                       message names the op sequence number, both ranks
//                       and both calls);
//   DeadlineExceeded  - a peer sent nothing within the timeout (the message
//                       names the op, algorithm, step and the peer's rank and
//                       address; that peer is aborted on the transport);
//   Unavailable       - the transport lost a peer (named);
//   DataLoss          - the transport rejected a write;
//   FailedPrecondition - the op's RegionIds were retired on the transport
//                       (another Communicator with retire_stale_regions
//                       shares it: see below).
// After an error the contents of `data` are unspecified; the Communicator
// stays usable for later ops with peers that are still reachable.
//
// Memory: scratch is allocated once per Communicator, grown to the largest
// op seen and reused; it is registered per op under the op's RegionId.
//
// Late writes. A peer may still write into an op that is gone on this rank:
// the op failed here (cancelled, rejected, mismatched, a peer error) while
// the peer's writes for it were in flight or not yet posted, or this rank
// skipped it (SkipTo()). Such writes find no registration; the transport
// holds them in its bounded early-write room, and enough of them fill it and
// pause the connection. With CommunicatorOptions::retire_stale_regions set,
// the Communicator retires (Transport::RetireRegions) the RegionIds of every
// op below a watermark W, so that the transport drops and counts those
// writes instead (stale_writes_dropped()). The rule:
//   - W only grows, and only this Communicator moves it; every op below W
//     has ended on this rank (ops run one at a time) or will never run here.
//   - SkipTo(seq) raises W to seq.
//   - An op `seq` that returns an error (any: cancellation, timeout, peer
//     error, mismatch, a call rejected before it started) raises W to
//     seq + 1. Ops that succeed leave W alone: every write a peer sends for
//     such an op has landed and been consumed before it returned, so none
//     can arrive late; their ids are retired with the next failure or skip.
// So an op's RegionIds are retired only after this Communicator is done with
// them, and never registered by it again (sequence numbers only grow).
//
// Thread-compatible: issue one op at a time (ops block the calling thread,
// which also runs the reductions).
#ifndef STARLING_SERVER_COLLECTIVE_COMMUNICATOR_H_
#define STARLING_SERVER_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/collective/cancellation.h"
#include "server/collective/chunk_planner.h"
#include "server/collective/collective_observer.h"
#include "server/collective/data_type.h"
#include "server/collective/descriptor_inbox.h"
#include "server/collective/op_descriptor.h"
#include "server/collective/selector.h"
#include "server/transport/completion.h"
#include "server/transport/transport.h"

namespace starling {
namespace collective {

struct CommunicatorOptions {
  // Time an op may take before it fails naming the missing peer.
  absl::Duration timeout = absl::Seconds(30);
  // Target chunk size of the pipelining (element-aligned, at most
  // ChunkPlanner::kMaxChunks chunks per step). Must match on every rank.
  size_t chunk_bytes = ChunkPlanner::kDefaultChunkBytes;
  // Thresholds of the automatic algorithm choice. Must match on every rank.
  SelectorOptions selector;
  // Retire the RegionIds of ops below the watermark described above, so that
  // late writes for failed and skipped ops are dropped and counted by the
  // transport instead of held. Default off. Set it only where this
  // Communicator is the sole issuer of collective ops on its transport for
  // the transport's whole life (the node daemon): retired ids can never be
  // registered again, so a second Communicator on the same transport, which
  // numbers its ops from 0 as well, would fail its op `seq` with
  // FailedPrecondition once this one has retired `seq` (tests that build a
  // Communicator per check over one transport group leave it off).
  bool retire_stale_regions = false;
  // Told about every op as it starts, as peers arrive and as it ends
  // (collective_observer.h); borrowed, must outlive the Communicator. Null:
  // nobody is told.
  CollectiveObserver* observer = nullptr;
};

struct CallOptions {
  // kAuto: chosen by SelectAlgorithm(). Otherwise forced for this call.
  Algorithm algorithm = Algorithm::kAuto;
  // Overrides CommunicatorOptions::timeout for this call.
  std::optional<absl::Duration> timeout;
  // When set (borrowed for the call), Cancel() on it ends the op within
  // kCancellationPollInterval with its status; null: not cancellable.
  const Cancellation* cancel = nullptr;
};

class Communicator {
 public:
  using Options = CommunicatorOptions;

  // `transport` is borrowed and must outlive the Communicator.
  // InvalidArgument for a null transport, a non-positive timeout or a zero
  // chunk size.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      transport::Transport* transport, const Options& options = Options());

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator() = default;

  int rank() const;
  int size() const;
  const Options& options() const { return options_; }
  // Sequence number the next op will carry (starts at 0).
  uint64_t next_op_seq() const { return next_seq_; }
  // Continues numbering at `seq`, which every rank must agree on (the node
  // daemons start each training run at a sequence number above any used
  // before, so that late frames of an earlier run never match). With
  // retire_stale_regions, also retires the RegionIds of every op below
  // `seq`, so that a peer's writes for them are dropped on arrival.
  // REQUIRES: seq >= next_op_seq(); no op is running.
  void SkipTo(uint64_t seq);
  // Ops below this have their RegionIds retired on the transport (the
  // watermark W above; stays 0 without retire_stale_regions).
  uint64_t retired_op_seq_end() const { return retired_end_; }
  // Writes the transport dropped because their region was retired (by this
  // Communicator or any other user of the transport), since its creation:
  // the daemon exports it as a counter. Thread-safe, unlike the rest.
  uint64_t stale_writes_dropped() const {
    return transport_->stale_writes_dropped();
  }

  // data = op over all ranks' data, element-wise.
  absl::Status AllReduce(absl::Span<std::byte> data, DataType type, ReduceOp op,
                         const CallOptions& call = CallOptions());

  // Afterwards block rank() of ShardLayout(elements, size()) holds the
  // reduced values; other bytes of `data` are unspecified.
  absl::Status ReduceScatter(absl::Span<std::byte> data, DataType type,
                             ReduceOp op,
                             const CallOptions& call = CallOptions());

  // Each rank contributes block rank() of ShardLayout(elements, size());
  // afterwards every rank holds every block.
  absl::Status AllGather(absl::Span<std::byte> data, DataType type,
                         const CallOptions& call = CallOptions());

  // Every rank's `data` becomes `root`'s.
  absl::Status Broadcast(absl::Span<std::byte> data, DataType type, int root,
                         const CallOptions& call = CallOptions());

  // `data` is two halves: the first is sent into the second half of rank
  // (rank() + distance) mod size(), and the second receives rank
  // (rank() - distance) mod size()'s first half (shift.h). InvalidArgument
  // for a distance outside [1, size()) (any, for a group of 1) or an odd
  // element count.
  absl::Status Shift(absl::Span<std::byte> data, DataType type, int distance,
                     const CallOptions& call = CallOptions());

  // Returns once every rank has entered the barrier.
  absl::Status Barrier(const CallOptions& call = CallOptions());

 private:
  Communicator(transport::Transport* transport, const Options& options);

  // Takes the next sequence number, runs the op and, when it fails, retires
  // its RegionIds (retire_stale_regions).
  absl::Status Run(OpKind kind, absl::Span<std::byte> data, DataType type,
                   ReduceOp op, int root, const CallOptions& call);
  absl::Status RunOp(uint64_t seq, OpKind kind, absl::Span<std::byte> data,
                     DataType type, ReduceOp op, int root,
                     const CallOptions& call);
  // Raises the watermark to `end` (no-op if it is there already or
  // retire_stale_regions is off): retires the ids of ops [W, end).
  void RetireOpsBelow(uint64_t end);

  transport::Transport* const transport_;
  const Options options_;
  uint64_t next_seq_ = 0;
  uint64_t retired_end_ = 0;        // the watermark W: ops below it are retired
  std::vector<std::byte> scratch_;  // grows to the largest op's need
  // One per peer, reused by every op (see OpContext::Finish).
  std::vector<std::unique_ptr<transport::Completion>> completions_;
  // Every op's peers' descriptors and arrival notices.
  DescriptorInbox descriptors_;
  DescriptorInbox notices_;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_COMMUNICATOR_H_
