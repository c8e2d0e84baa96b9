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
// parameters, is the engine's; so is, after publishing and before the
// pushes are answered, the replica's part (sync_run.h): HandToBuddy (the
// master gradients shifted to the buddy, the owner's taken, then a
// barrier) and UpdateReplica. A pull copies the tensors it names out of
// the parameters into the worker's pool, narrowed to 16 bits for 16-bit
// tensors. The run's master is taken from its initial parameters
// (TakeMaster). The rounds every mode has (a worker all-reduce, the initial
// parameters) are run/shared_rounds.h's.
//
// Copies in user space, counted in NodeMetrics::*_copied_bytes: the local
// reduce reads each pushed buffer once and writes the gradient buffer once;
// a pull reads and writes each element it copies once.
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
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/round.h"
#include "server/node/sync/sync_run.h"
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
  absl::Status ReduceBucket(const std::vector<Round>& rounds, SyncRun& run,
                            int bucket, const collective::CallOptions& call);

  // Steps 3-4 after the last bucket of push round `step` (version
  // step + 1). Errors annotated "optimizer", "all-gather of bucket k".
  // REQUIRES: the parameters are the caller's to write (no pull reads them).
  absl::Status UpdateAndGather(SyncRun& run, int64_t step,
                               const collective::CallOptions& call);
  // Its two halves: step 3 alone (with a replica, the master and state it
  // overwrites kept in run.undo_*; run.master_version = step + 1), and
  // step 4.
  absl::Status UpdateMaster(SyncRun& run, int64_t step);
  absl::Status Gather(SyncRun& run, const collective::CallOptions& call);

  // After the all-gather of step `step` (the version may be published, the
  // master gradients still the step's): this rank's master gradients to
  // its buddy and the replica's owner's from it (Communicator::Shift),
  // then a barrier, so that once any rank returns every buddy holds its
  // owner's gradient of the step. The collectives' errors, annotated with
  // both ranks. REQUIRES: run.replica.
  // (`step`: the push round; the owner's half then holds the update of
  // version step + 1: ShardReplica::gradient_version.)
  // With `vote` (not null) the barrier is a one-float all-reduce (max) of
  // *vote instead, which leaves the same answer on every rank (Vote).
  absl::Status HandToBuddy(SyncRun& run, int64_t step,
                           const collective::CallOptions& call,
                           float* vote = nullptr);

  // *vote becomes the largest of every rank's (a one-float all-reduce, also
  // a barrier): a decision alike on every daemon.
  absl::Status Vote(float* vote, const collective::CallOptions& call);

  // After HandToBuddy for version step + 1: the optimizer on the replica with
  // the owner's gradient HandToBuddy took, and the check that the replica
  // equals what the owner all-gathered. The optimizer's error (the
  // replica then lags: starling_node_replica_lag_steps); DataLoss the
  // first time the replica differs (counted every time).
  // REQUIRES: run.replica; no step writes the parameters meanwhile.
  absl::Status UpdateReplica(SyncRun& run, int64_t step);

  // The master shard from run.store->parameters() (version 0, once the
  // initial parameters are in), and the replica's, if any. Workers of a 16-bit
  // run see the 16-bit values; the master keeps them exactly (they came from
  // 16-bit buffers, or are zeros).
  static void TakeMaster(SyncRun& run);

  // A pull: copies the tensors `pull` names from run.store->parameters()
  // into `worker`'s pool. InvalidArgument for a tensor not declared or of
  // another size, or a slice outside the pool. REQUIRES: no
  // step writes the parameters meanwhile.
  absl::Status CopyParameters(const WorkerHandle& worker,
                              const proto::PullParametersRequest& pull,
                              const SyncRun& run) const;

 private:
  // *vote becomes the largest of every rank's (Vote, HandToBuddy).
  absl::Status AllReduceMax(float* vote, const collective::CallOptions& call);
  // Step 1: the bucket's gradients into run.store->gradients().
  absl::Status LocalReduce(const std::vector<Round>& rounds, SyncRun& run,
                           int bucket);

  collective::Communicator* const comm_;
  NodeMetrics* const metrics_;
  // Step thread only: LocalReduce's pushed buffers, per tensor (kept so
  // that a step allocates nothing once the lists have grown).
  std::vector<std::vector<absl::Span<const std::byte>>> reduce_inputs_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_STEP_DATA_PATH_H_
