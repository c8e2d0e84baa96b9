// Run: the state of one training run on one node daemon (DESIGN.md
// "Lifetimes": runs follow one another on the same daemons). It is created
// when the workers' declarations end and the group agreed on them (the
// coordinator's BeginRun), and released when the run finished or failed and
// its last user (the step thread, a pull, a parameter-server request) let
// go: the tensor layout, the parameters and gradients (ShardStore), and the
// optimizer state for this daemon's shard.
//
// Gradient buckets and the master shard (sync modes). The flat parameter
// vector is cut into buckets, each a run of whole tensors (proto
// AssignBuckets: bucket 0 holds the last declared tensors, so that backward
// fills it first). Each bucket is reduce-scattered as soon as the local
// workers pushed it, and this rank owns part `rank` of every bucket
// (ShardLayout(bucket elements, ranks)): 1/N of the model, the same share
// as one flat shard, but ready bucket by bucket. The owned parts, one
// after the other in bucket order, are the master shard: float32 master
// parameters, their reduced gradients, and the optimizer state (sized for
// it). store->parameters() holds the full vector as workers see it (the
// all-gather's result); in 16-bit runs that is the 16-bit values widened,
// while the master keeps float32. Parameter-server mode has one bucket and
// updates store->shard_parameters() instead.
//
// Wire type: when every tensor is float16 (or every one bfloat16) the
// reduce-scatter and all-gather move that type (`wire16` stages them);
// otherwise float32.
//
// Thread safety: the immutable fields may be read from any thread holding a
// reference. The store's parameters are written only by the step thread
// (sync modes, SyncEngine's reader/updating protocol) or under `ps_mu`
// (parameter-server mode).
#ifndef STARLING_SERVER_NODE_RUN_RUN_H_
#define STARLING_SERVER_NODE_RUN_RUN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/collective/cancellation.h"
#include "server/collective/data_type.h"
#include "server/node/run/declared_tensors.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/shard_store.h"

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

struct Run {
  // Numbered from 1 by the coordinator.
  uint64_t id = 0;
  TensorLayout layout;
  // Every worker of the job.
  int total_workers = 0;
  absl::Time started;
  std::unique_ptr<shard::ShardStore> store;
  std::unique_ptr<shard::Optimizer> optimizer;
  // Cancelled when the run fails: ends the collective in flight at once.
  collective::Cancellation cancel;

  // Sync modes (see the file comment); immutable after CreateRun.
  std::vector<Bucket> buckets;
  collective::DataType wire = collective::DataType::kFloat32;
  // Step thread only: the master shard and its reduced gradients, and the
  // 16-bit staging of the wire (full length; empty for a float32 wire).
  std::vector<float> master;
  std::vector<float> master_gradients;
  std::vector<uint16_t> wire16;

  // Parameter-server mode: updates of this daemon's shard.
  absl::Mutex ps_mu;
  int64_t ps_updates ABSL_GUARDED_BY(ps_mu) = 0;

  // Adds one push's client ReportStepTimes (every mode) and returns the
  // run's compute ratio so far: compute seconds / step seconds.
  double AddStepTimes(double compute_seconds, double step_seconds) {
    absl::MutexLock lock(&times_mu);
    compute_sum += compute_seconds;
    step_sum += step_seconds;
    return step_sum > 0 ? compute_sum / step_sum : 0.0;
  }
  absl::Mutex times_mu;
  double compute_sum ABSL_GUARDED_BY(times_mu) = 0;
  double step_sum ABSL_GUARDED_BY(times_mu) = 0;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_H_
