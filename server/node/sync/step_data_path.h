// StepDataPath: the bytes a SyncEngine moves, between the workers' pools,
// the run's buffers and the other daemons.
//
// The synchronous step (DESIGN.md "One synchronous step"), for push round s,
// bucket by bucket (run.h: buckets, owned parts, master shard, wire type):
//   1. local reduce: the bucket's gradients, read in place from the
//      workers' pools in worker-index order, summed in float32 straight
//      into the bucket's range of the run's gradient buffer in one pass
//      over memory (float32 pushes: collective::ReduceMany, the first
//      copied, the others added; 16-bit pushes widened as they are added);
//   2. reduce-scatter (sum) of the bucket across daemons, in the wire type
//      (16-bit runs narrow the float32 sum into `wire16` first), and this
//      rank's part into the master gradients (ReduceBucket);
// and after the step's last bucket (UpdateAndGather):
//   3. the optimizer (gradient scale 1 / total workers) updates the master
//      shard;
//   4. per bucket, this rank's part of the master into the full vector (or
//      `wire16`) and the all-gather, widened into store->parameters().
// Publishing version s + 1, and keeping pulls out while step 4 writes the
// parameters, is the engine's. A worker all-reduce is summed locally into a
// staging buffer, all-reduced across daemons and copied back into each
// worker's buffer. A pull copies the tensors it names out of the
// parameters into the worker's pool, narrowed to 16 bits for 16-bit
// tensors. The run's initial parameters come from one worker's commit:
// InitializeParameters.
//
// Copies in user space, counted in NodeMetrics::*_copied_bytes: the local
// reduce reads each pushed buffer once and writes the gradient buffer once;
// the all-reduce staging reads each buffer once, writes the sum once, then
// reads it and writes each buffer once per worker; a pull reads and writes
// each element it copies once.
//
// Thread safety: everything but CopyParameters is confined to the engine's
// step thread (they share the staging buffers); CopyParameters may run on
// any thread at once with them (it reads only its arguments; metrics are
// thread-safe). No call takes a lock; the collectives block up to the
// call's timeout, so callers hold none either.
#ifndef STARLING_SERVER_NODE_SYNC_STEP_DATA_PATH_H_
#define STARLING_SERVER_NODE_SYNC_STEP_DATA_PATH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

class StepDataPath {
 public:
  // `comm` and `metrics` are borrowed and must outlive this.
  StepDataPath(collective::Communicator* comm, NodeMetrics* metrics);
  StepDataPath(const StepDataPath&) = delete;
  StepDataPath& operator=(const StepDataPath&) = delete;

  // Steps 1-2 for bucket `bucket` of push round `step`. InvalidArgument
  // for a pushed tensor not declared, of another size, or not in this
  // bucket; the collective's code, annotated "reduce-scatter of bucket k".
  absl::Status ReduceBucket(const std::vector<Round>& rounds, Run& run,
                            int bucket, const collective::CallOptions& call);

  // Steps 3-4 after the last bucket of push round `step` (version
  // step + 1). Errors annotated "optimizer", "all-gather of bucket k".
  // REQUIRES: the parameters are the caller's to write (no pull reads them).
  absl::Status UpdateAndGather(Run& run, int64_t step,
                               const collective::CallOptions& call);

  // OK when the commit `supplier` carries initial parameters that `tensors`
  // (the local table) can take: each names a declared tensor, has its size
  // and lies in the supplier's pool. InvalidArgument naming the tensor and
  // the worker otherwise.
  static absl::Status CheckInitialParameters(
      const Round& supplier, const std::vector<proto::TensorSpec>& tensors);

  // Version 0 of a new run on every daemon: the values of the first
  // supplier in (rank, worker index) order, `supplier` being this daemon's
  // (null if none of its workers supplied any), agreed by a one-integer
  // all-reduce and broadcast from that rank; zeros when no daemon has one.
  // Fills store->parameters() and the master shard. REQUIRES: `supplier`
  // passed CheckInitialParameters; the parameters are the caller's.
  absl::Status InitializeParameters(const Round* supplier, Run& run,
                                    const collective::CallOptions& call);

  // A worker all-reduce round: the sum of the workers' buffers, across
  // daemons, into each buffer; a failed collective leaves the buffers as
  // they were. Errors are annotated with `where`.
  absl::Status AllReduce(const std::vector<Round>& rounds,
                         const std::string& where,
                         const collective::CallOptions& call);

  // A pull: copies the tensors `pull` names from run.store->parameters()
  // into `worker`'s pool. InvalidArgument for a tensor not declared or of
  // another size, or a slice outside the pool. REQUIRES: no
  // step writes the parameters meanwhile.
  absl::Status CopyParameters(const WorkerHandle& worker,
                              const proto::PullParametersRequest& pull,
                              const Run& run) const;

 private:
  // Step 1: the bucket's gradients into run.store->gradients().
  absl::Status LocalReduce(const std::vector<Round>& rounds, Run& run,
                           int bucket);

  collective::Communicator* const comm_;
  NodeMetrics* const metrics_;
  std::vector<float> scratch_;  // step thread only: all-reduce sums
  // Step thread only: LocalReduce's pushed buffers, per tensor (kept so
  // that a step allocates nothing once the lists have grown).
  std::vector<std::vector<absl::Span<const std::byte>>> reduce_inputs_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_STEP_DATA_PATH_H_
