// StepDataPath: the bytes a SyncEngine moves, between the workers' pools,
// the run's buffers and the other daemons.
//
// The synchronous step (DESIGN.md "One synchronous step"), for push round s:
//   1. local reduce: the workers' gradients, read in place from their pools,
//      summed in worker-index order straight into the run's gradient
//      buffer, the one the reduce-scatter sends, in one pass over memory
//      (collective::ReduceMany: the first copied, the others added);
//   2. reduce-scatter (sum) across daemons;
//   3. the optimizer (gradient scale 1 / total workers) updates the shard;
//   4. all-gather of the parameters.
// ApplyStep does 1-4; publishing version s + 1, and keeping pulls out while
// it runs, is the engine's. A worker all-reduce is summed locally into a
// staging buffer, all-reduced across daemons and copied back into each
// worker's buffer. A pull copies the tensors it names out of the
// parameters into the worker's pool.
//
// Copies in user space, counted in NodeMetrics::*_copied_bytes: the local
// reduce reads each pushed buffer once and writes the gradient buffer once;
// the all-reduce staging reads each buffer once, writes the sum once, then
// reads it and writes each buffer once per worker; a pull reads and writes
// each element it copies once.
//
// Thread safety: ApplyStep and AllReduce are confined to the engine's step
// thread (they share the staging buffer); CopyParameters may run on any
// thread at once with them (it reads only its arguments; metrics are
// thread-safe). No call takes a lock; the collectives block up to the
// call's timeout, so callers hold none either.
#ifndef STARLING_SERVER_NODE_STEP_DATA_PATH_H_
#define STARLING_SERVER_NODE_STEP_DATA_PATH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/node_metrics.h"
#include "server/node/round.h"
#include "server/node/run.h"
#include "server/node/worker_session.h"

namespace starling {
namespace node {

class StepDataPath {
 public:
  // `comm` and `metrics` are borrowed and must outlive this.
  StepDataPath(collective::Communicator* comm, NodeMetrics* metrics);
  StepDataPath(const StepDataPath&) = delete;
  StepDataPath& operator=(const StepDataPath&) = delete;

  // Steps 1-4 for push round `step` of `run`: the rounds' gradients into
  // run.store->gradients(), reduce-scatter, optimizer (version step + 1),
  // all-gather into run.store->parameters(). InvalidArgument for a pushed
  // tensor not declared or of another size; the collectives' codes,
  // annotated "reduce-scatter", "optimizer", "all-gather". REQUIRES: the
  // parameters are the caller's to write (no pull reads them).
  absl::Status ApplyStep(const std::vector<Round>& rounds, Run& run,
                         int64_t step, const collective::CallOptions& call);

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
  // Step 1: the round's gradients into run.store->gradients().
  absl::Status LocalReduce(const std::vector<Round>& rounds, Run& run);

  collective::Communicator* const comm_;
  NodeMetrics* const metrics_;
  std::vector<float> scratch_;  // step thread only: all-reduce sums
  // Step thread only: LocalReduce's pushed buffers, per tensor (kept so
  // that a step allocates nothing once the lists have grown).
  std::vector<std::vector<absl::Span<const std::byte>>> reduce_inputs_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_STEP_DATA_PATH_H_
