// Run: the state of one training run on one node daemon (DESIGN.md
// "Lifetimes": runs follow one another on the same daemons). It is created
// when the workers' declarations end and the group agreed on them (the
// coordinator's BeginRun), and released when the run finished or failed and
// its last user (the step thread, a pull, a parameter-server request) let
// go: the tensor layout, the parameters and gradients (ShardStore), and the
// optimizer state for this daemon's shard.
//
// Thread safety: the immutable fields may be read from any thread holding a
// reference. The store's parameters are written only by the step thread
// (sync modes, SyncEngine's reader/updating protocol) or under `ps_mu`
// (parameter-server mode).
#ifndef STARLING_SERVER_NODE_RUN_H_
#define STARLING_SERVER_NODE_RUN_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/collective/cancellation.h"
#include "server/node/declared_tensors.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/shard_store.h"

namespace starling {
namespace node {

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

  // Parameter-server mode: updates of this daemon's shard.
  absl::Mutex ps_mu;
  int64_t ps_updates ABSL_GUARDED_BY(ps_mu) = 0;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_H_
