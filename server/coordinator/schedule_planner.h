// SchedulePlanner: which data partition each worker reads in each
// iteration, handed out K iterations per GetSchedule call.
//
// Terms: a *worker* is one local worker of one rank; workers are numbered
// rank-major, w = (workers of ranks 0..r-1) + local_worker, W in all. An
// epoch reads P = partitions_per_epoch partitions, each exactly once, in
// ceil(P / W) iterations: in iteration i of an epoch, worker w reads
// partition i * W + w when that is < P (round-robin over workers, iteration
// by iteration), so the last iteration of an epoch may leave some workers
// without data. Iterations are numbered globally from 0 across epochs.
//
// Immutable after construction; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_
#define STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_

#include <cstdint>
#include <vector>

#include "proto/coordinator.pb.h"

namespace starling {
namespace coordinator {

class SchedulePlanner {
 public:
  // REQUIRES: partitions_per_epoch >= 1, epochs >= 1,
  // iterations_per_schedule >= 1, workers_per_rank non-empty with every
  // entry >= 1.
  SchedulePlanner(uint64_t partitions_per_epoch, uint64_t epochs,
                  int iterations_per_schedule,
                  std::vector<int> workers_per_rank);

  uint64_t partitions_per_epoch() const { return partitions_per_epoch_; }
  uint64_t total_workers() const { return total_workers_; }
  uint64_t iterations_per_epoch() const { return iterations_per_epoch_; }
  uint64_t total_iterations() const { return iterations_per_epoch_ * epochs_; }
  int ranks() const { return static_cast<int>(workers_per_rank_.size()); }

  // The schedule of `rank` from `next_iteration`: K iterations, fewer only
  // at the end of training (none once next_iteration >= total_iterations()),
  // with done set when nothing follows; partitions_per_epoch, epochs and
  // iterations_per_epoch are filled whatever the count. REQUIRES: 0 <= rank <
  // ranks().
  proto::Schedule Plan(int rank, uint64_t next_iteration) const;

 private:
  const uint64_t partitions_per_epoch_;
  const uint64_t epochs_;
  const int iterations_per_schedule_;
  const std::vector<int> workers_per_rank_;
  // first_worker_[r]: global number of rank r's local worker 0.
  std::vector<uint64_t> first_worker_;
  uint64_t total_workers_ = 0;
  uint64_t iterations_per_epoch_ = 0;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_
