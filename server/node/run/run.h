// Run: the state of one training run on one node daemon (DESIGN.md
// "Lifetimes": runs follow one another on the same daemons). It is created
// when the workers' declarations end and the group agreed on them (the
// coordinator's BeginRun), and released when the run finished or failed and
// its last user (the step thread, a pull, a parameter-server request) let
// go: the tensor layout, the parameters and gradients (ShardStore), and the
// optimizer state for this daemon's shard.
//
// What a run holds beyond this is its engine's (run_engine.h): the
// synchronous step's buckets and master shard (sync/sync_run.h), the shard
// owners' update count (ps/ps_engine.h); each engine creates runs of its own
// kind, derived from Run.
//
// Thread safety: the immutable fields may be read from any thread holding a
// reference. The store's parameters are written as the run's engine says
// (sync: the step thread, while no pull reads them; shard owners: under
// the run's own lock).
#ifndef STARLING_SERVER_NODE_RUN_RUN_H_
#define STARLING_SERVER_NODE_RUN_RUN_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/collective/cancellation.h"
#include "server/node/run/declared_tensors.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/shard_store.h"

namespace starling {
namespace node {

struct Run {
  virtual ~Run() = default;

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
  // Continuations (run/carry_exchange.h). Which state of the run this is:
  // 0 for a run begun in its group, else the id of the continuation that
  // moved it here (the same on every daemon of that continuation).
  uint64_t state_id = 0;
  // A later continuation's run, whose state moved here but which not every
  // daemon of its group confirmed (a member lost at its end): kept beside
  // this one, with this daemon's rank and size in that group, until a later
  // plan says which of the two the run goes on from. Null: none.
  std::shared_ptr<Run> successor;
  int successor_rank = -1;
  int successor_size = 0;

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
