// CreateRun: a run's tables, memory and optimizer on this daemon, allocated
// once the group agreed on the run (RunRendezvous::BeginRun).
//
// A free function of its arguments: thread-safe; it allocates (memfd, mmap)
// but takes no lock and waits on no peer.
#ifndef STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_
#define STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/node/run/run.h"

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
  // Sync modes: the optimizer updates the master shard (run.h); false in
  // parameter-server mode, whose optimizer updates store->shard_parameters()
  // (then every tensor must be in bucket 0).
  bool master_shard = true;
};

// The run of `tensors` (their buckets set: proto::AssignBuckets), started
// now: the layout, the buckets, this rank's owned parts and master shard,
// the wire type (run.h). Unimplemented for a tensor that is not float32,
// float16 or bfloat16; InvalidArgument for a bucket whose tensors are not
// consecutive; the ShardStore's and optimizer's errors as they come.
absl::StatusOr<std::shared_ptr<Run>> CreateRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_FACTORY_H_
