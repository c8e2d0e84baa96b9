#include "server/coordinator/schedule_planner.h"

#include <algorithm>
#include <utility>

#include "server/base/logging.h"

namespace starling {
namespace coordinator {

SchedulePlanner::SchedulePlanner(uint64_t partitions_per_epoch, uint64_t epochs,
                                 int iterations_per_schedule,
                                 std::vector<int> workers_per_rank)
    : partitions_per_epoch_(partitions_per_epoch),
      epochs_(epochs),
      iterations_per_schedule_(iterations_per_schedule),
      workers_per_rank_(std::move(workers_per_rank)) {
  STARLING_CHECK(partitions_per_epoch_ >= 1 && epochs_ >= 1 &&
                 iterations_per_schedule_ >= 1 && !workers_per_rank_.empty());
  for (int workers : workers_per_rank_) {
    STARLING_CHECK(workers >= 1) << "workers per rank " << workers;
    first_worker_.push_back(total_workers_);
    total_workers_ += static_cast<uint64_t>(workers);
  }
  iterations_per_epoch_ =
      (partitions_per_epoch_ + total_workers_ - 1) / total_workers_;
}

proto::Schedule SchedulePlanner::Plan(int rank, uint64_t next_iteration) const {
  STARLING_CHECK(rank >= 0 && rank < ranks()) << "rank " << rank;
  const uint64_t total = total_iterations();
  const uint64_t count = next_iteration >= total
                             ? 0
                             : std::min<uint64_t>(iterations_per_schedule_,
                                                  total - next_iteration);
  const int local_workers = workers_per_rank_[rank];

  proto::Schedule schedule;
  schedule.set_epoch(std::min(next_iteration / iterations_per_epoch_, epochs_));
  schedule.set_first_iteration(next_iteration);
  schedule.set_iteration_count(static_cast<int32_t>(count));
  schedule.set_done(next_iteration + count >= total);
  schedule.set_iterations_per_epoch(iterations_per_epoch_);
  schedule.set_epochs(epochs_);
  schedule.set_partitions_per_epoch(partitions_per_epoch_);
  for (int local = 0; local < local_workers; ++local) {
    proto::PartitionAssignment* all = schedule.add_assignments();
    all->set_rank(rank);
    all->set_local_worker(local);
  }
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t global = next_iteration + j;
    const uint64_t in_epoch = global % iterations_per_epoch_;
    proto::ScheduledIteration* iteration = schedule.add_iterations();
    iteration->set_iteration(global);
    iteration->set_epoch(global / iterations_per_epoch_);
    iteration->set_iteration_in_epoch(in_epoch);
    for (int local = 0; local < local_workers; ++local) {
      const uint64_t partition =
          in_epoch * total_workers_ + first_worker_[rank] + local;
      if (partition >= partitions_per_epoch_) continue;
      proto::PartitionAssignment* one = iteration->add_assignments();
      one->set_rank(rank);
      one->set_local_worker(local);
      one->add_partitions(partition);
      schedule.mutable_assignments(local)->add_partitions(partition);
    }
  }
  return schedule;
}

}  // namespace coordinator
}  // namespace starling
