// SyncRun: a run of the synchronous step (SyncEngine): the Run every mode
// has, plus its gradient buckets, master shard and wire type.
//
// Gradient buckets and the master shard. The flat parameter vector is cut
// into buckets, each a run of whole tensors (proto AssignBuckets: bucket 0
// holds the last declared tensors, so that backward fills it first). Each
// bucket is reduce-scattered as soon as the local workers pushed it, and
// this rank owns part `rank` of every bucket (ShardLayout(bucket elements,
// ranks)): 1/N of the model, the same share as one flat shard, but ready
// bucket by bucket. The owned parts, one after the other in bucket order,
// are the master shard: float32 master parameters, their reduced
// gradients, and the optimizer state (sized for it). store->parameters()
// holds the full vector as workers see it (the all-gather's result); in
// 16-bit runs that is the 16-bit values widened, while the master keeps
// float32.
//
// Wire type: when every tensor is float16 (or every one bfloat16) the
// reduce-scatter and all-gather move that type (`wire16` stages them);
// otherwise float32.
//
// Replica (RunFactoryOptions::buddy_distance d > 0, more than one rank):
// this rank is the buddy of rank r - d (mod N) and keeps a replica of that
// rank's master shard and optimizer state; rank r + d keeps this rank's.
// Each step, once the version is published (pulls go on), the ranks shift
// their master gradients (the step's reduced gradient of their shard) by d
// (Communicator::Shift) and pass a barrier before the step's pushes are
// answered: when a worker is told its step is committed, every shard's
// update of it exists on two daemons. The buddy applies the same
// optimizer to its replica and checks it against what the owner
// all-gathered: equal bit for bit (the same code on the same inputs), or
// the replica is counted as diverged. Every run keeps one (but those of
// optimizer "none", whose shard never changes): a run that goes on after a
// daemon is lost takes that daemon's shard from its buddy
// (sync/continuation.h), which a stateless optimizer's all-gathered
// parameters cannot promise (an all-gather cut short leaves them mixed).
//
// Continuation. With a replica, each rank also keeps its master and
// optimizer state as they were before its last update (`undo_*`), and the
// versions of what it holds (`master_version`, the replica's `version` and
// `gradient_version`), so that the survivors of a lost daemon can agree on
// the last step every shard can be brought to and roll forward or back to
// it (sync/continuation.h).
//
// Thread safety: the buckets and wire type are immutable after
// CreateSyncRun; the master, its gradients, `wire16` and the replica
// belong to the step thread.
#ifndef STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_
#define STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "server/collective/data_type.h"
#include "server/node/run/run.h"
#include "server/node/run/run_factory.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace node {

struct Bucket {
  // Elements [begin, end) of the flat vector; tensors [first_tensor,
  // end_tensor) of the layout.
  uint64_t begin = 0;
  uint64_t end = 0;
  int first_tensor = 0;
  int end_tensor = 0;
  // This rank's part [owned_begin, owned_end) (flat), at master_offset in
  // the master shard.
  uint64_t owned_begin = 0;
  uint64_t owned_end = 0;
  uint64_t master_offset = 0;
};

// Rank `of_rank`'s master shard, as its buddy keeps it.
struct ShardReplica {
  // The owner, and the buddy distance d (this rank = of_rank + d mod N).
  int of_rank = -1;
  int distance = 0;
  // The owner's part of each bucket: flat [begin, end), at `offset` in
  // `master` (bucket order, as the owner's master shard).
  struct Part {
    uint64_t begin = 0;
    uint64_t end = 0;
    uint64_t offset = 0;
  };
  std::vector<Part> parts;
  std::vector<float> master;
  // The run's optimizer, made for the owner's shard.
  std::unique_ptr<shard::Optimizer> optimizer;
  // The largest master shard of any rank (so the same on every rank): each
  // half of the shift's buffer, SyncRun::master_gradients.
  size_t half = 0;
  // 16-bit wires: the replica narrowed to the wire type, for the check
  // against what the owner all-gathered (sized once; empty for float32).
  std::vector<uint16_t> narrowed;
  // Updates applied to the replica (the owner's version it holds).
  int64_t version = 0;
  // The version whose update the owner's half of the shift buffer holds
  // (the owner's gradient of step gradient_version - 1), once the shift of
  // that step returned here; -1 before any.
  int64_t gradient_version = -1;
  // Equal to every version the owner all-gathered so far.
  bool exact = true;
};

struct SyncRun : Run {
  std::vector<Bucket> buckets;
  collective::DataType wire = collective::DataType::kFloat32;
  // The master shard and its reduced gradients (the first master.size()
  // floats), and the 16-bit staging of the wire (full length; empty for a
  // float32 wire). With a replica, master_gradients is the shift's buffer
  // itself, two halves of replica->half floats: this rank's reduced
  // gradients, zero-padded (the padding is never written), then the
  // owner's, as the shift leaves them.
  std::vector<float> master;
  std::vector<float> master_gradients;
  std::vector<uint16_t> wire16;
  // The replica this rank keeps of another's shard; null without one.
  std::unique_ptr<ShardReplica> replica;
  // Updates applied to the master (the step thread's; with a replica,
  // undo_master and undo_state hold version master_version - 1 once
  // master_version > 0).
  int64_t master_version = 0;
  // Step thread: when this daemon last handed a durable checkpoint of this
  // run to the writer (InfinitePast: not yet; the interval then counts
  // from the run's first step).
  absl::Time last_checkpoint = absl::InfinitePast();
  std::vector<float> undo_master;
  std::vector<float> undo_state;
};

// The run of `tensors` (their buckets set: proto::AssignBuckets): InitRun's
// parts, the buckets, this rank's owned parts and master shard, the wire
// type, an optimizer for the master, and the replica of rank
// rank - buddy_distance's (none for a distance of 0, a group of one, or
// optimizer "none").
// InitRun's errors; InvalidArgument for a bucket whose tensors are not
// consecutive or a buddy distance outside [0, ranks); the optimizer's.
absl::StatusOr<std::shared_ptr<SyncRun>> CreateSyncRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_
