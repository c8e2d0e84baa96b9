// The parts every run has on this daemon, allocated once the group agreed
// on the run (RunRendezvous::BeginRun): each engine's CreateRun
// (RunEngine::CreateRun) fills its own kind of Run with InitRun, adds what
// its mode keeps, then gives it its optimizer (AddOptimizer).
//
// Free functions of their arguments: thread-safe; they allocate (memfd,
// mmap) but take no lock and wait on no peer.
#ifndef STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_
#define STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/node/run/run.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace node {

struct RunFactoryOptions {
  // Numbered from 1 by the coordinator.
  uint64_t run_id = 0;
  // Every worker of the job: the optimizer's gradient scale is 1 / this
  // (1 for easgd, which adds the elastic differences as they come).
  int total_workers = 0;
  // This daemon's rank among `ranks`: which shard it updates.
  int ranks = 1;
  int rank = 0;
  // shard::CreateOptimizer names; "none": the shard is never updated.
  std::string optimizer = "sgd";
  float learning_rate = 0.01f;
  // Sync runs: this rank keeps a replica of the master shard of rank
  // `rank - buddy_distance` (mod ranks) and hands its own to rank
  // `rank + buddy_distance` (sync/sync_run.h ShardReplica); 0: no replica.
  int buddy_distance = 0;
};

// Fills `run` for `tensors` (their buckets set: proto::AssignBuckets),
// started now: id, layout, total workers and the ShardStore of the full
// vector (this rank's flat shard: store->shard_parameters()).
// Unimplemented for a tensor that is not float32, float16 or bfloat16; the
// ShardStore's errors as they come.
absl::Status InitRun(const std::vector<proto::TensorSpec>& tensors,
                     const RunFactoryOptions& options, Run* run);

// Gives `run` its optimizer, with state for the `elements` it updates, and
// the gradient scale 1 / total workers (except easgd). The optimizer
// factory's errors as they come.
absl::Status AddOptimizer(const RunFactoryOptions& options, size_t elements,
                          Run* run);

// The optimizer AddOptimizer gives a run of `total_workers`, for `elements`:
// also the one a buddy applies to its replica of another rank's shard.
absl::StatusOr<std::unique_ptr<shard::Optimizer>> CreateRunOptimizer(
    const RunFactoryOptions& options, size_t elements, int total_workers);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_
