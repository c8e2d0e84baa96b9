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
// Thread safety: the buckets and wire type are immutable after
// CreateSyncRun; the master, its gradients and `wire16` belong to the step
// thread.
#ifndef STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_
#define STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/collective/data_type.h"
#include "server/node/run/run.h"
#include "server/node/run/run_factory.h"

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

struct SyncRun : Run {
  std::vector<Bucket> buckets;
  collective::DataType wire = collective::DataType::kFloat32;
  // The master shard and its reduced gradients, and the 16-bit staging of
  // the wire (full length; empty for a float32 wire).
  std::vector<float> master;
  std::vector<float> master_gradients;
  std::vector<uint16_t> wire16;
};

// The run of `tensors` (their buckets set: proto::AssignBuckets): InitRun's
// parts, the buckets, this rank's owned parts and master shard, the wire
// type, and an optimizer for the master. InitRun's errors; InvalidArgument
// for a bucket whose tensors are not consecutive; the optimizer's.
absl::StatusOr<std::shared_ptr<SyncRun>> CreateSyncRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_SYNC_RUN_H_
