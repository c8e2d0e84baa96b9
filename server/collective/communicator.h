// Communicator: the public entry to Starling's collectives over one
// Transport group.
//
//   ASSIGN_OR_RETURN(auto comm, Communicator::Create(transport));
//   RETURN_IF_ERROR(comm->AllReduce(AsWritableBytes(grad), DataType::kFloat32,
//                                   ReduceOp::kSum));
//
// Every rank must issue the same ops in the same order: each op takes the
// next sequence number, from which its RegionIds and control tags derive, so
// late frames of op k can never land in op k+1. All ops are in place on
// `data` (whole elements, any alignment) and return:
//   InvalidArgument   - bad arguments, or ranks made different calls (the
//                       message names the op sequence number, both ranks
//                       and both calls);
//   DeadlineExceeded  - a peer sent nothing within the timeout (the message
//                       names the op, algorithm, step and the peer's rank and
//                       address; that peer is aborted on the transport);
//   Unavailable       - the transport lost a peer (named);
//   DataLoss          - the transport rejected a write.
// After an error the contents of `data` are unspecified; the Communicator
// stays usable for later ops with peers that are still reachable.
//
// Memory: scratch is allocated once per Communicator, grown to the largest
// op seen and reused; it is registered per op under the op's RegionId.
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
#include "server/collective/data_type.h"
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
  // before, so that late frames of an earlier run never match).
  // REQUIRES: seq >= next_op_seq().
  void SkipTo(uint64_t seq);

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

  // Returns once every rank has entered the barrier.
  absl::Status Barrier(const CallOptions& call = CallOptions());

 private:
  Communicator(transport::Transport* transport, const Options& options);

  absl::Status Run(OpKind kind, absl::Span<std::byte> data, DataType type,
                   ReduceOp op, int root, const CallOptions& call);

  transport::Transport* const transport_;
  const Options options_;
  uint64_t next_seq_ = 0;
  std::vector<std::byte> scratch_;  // grows to the largest op's need
  // One per peer, reused by every op (see OpContext::Finish).
  std::vector<std::unique_ptr<transport::Completion>> completions_;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_COMMUNICATOR_H_
