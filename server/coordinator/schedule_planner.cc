#include "server/coordinator/schedule_planner.h"

#include <algorithm>
#include <utility>

#include "server/base/logging.h"

namespace starling {
namespace coordinator {

SchedulePlanner::SchedulePlanner(uint64_t partitions_per_epoch, uint64_t epochs,
                                 int iterations_per_schedule)
    : partitions_per_epoch_(partitions_per_epoch),
      epochs_(epochs),
      iterations_per_schedule_(iterations_per_schedule) {
  STARLING_CHECK(partitions_per_epoch_ >= 1 && epochs_ >= 1 &&
                 iterations_per_schedule_ >= 1);
}

SchedulePlanner::SchedulePlanner(uint64_t partitions_per_epoch, uint64_t epochs,
                                 int iterations_per_schedule,
                                 std::vector<int> workers_per_rank)
    : SchedulePlanner(partitions_per_epoch, epochs, iterations_per_schedule) {
  segments_.push_back(MakeSegment(0, 0, 0, 0, std::move(workers_per_rank)));
}

SchedulePlanner::SchedulePlanner(const SchedulePlanner& before,
                                 uint64_t from_iteration,
                                 std::vector<int> workers_per_rank)
    : SchedulePlanner(before.partitions_per_epoch_, before.epochs_,
                      before.iterations_per_schedule_) {
  STARLING_CHECK(from_iteration >= before.first_iteration())
      << "iteration " << from_iteration << " is before the plan's segment at "
      << before.first_iteration();
  // Segments wholly before from_iteration stay, for the record.
  for (const Segment& s : before.segments_) {
    if (s.first_iteration < from_iteration) segments_.push_back(s);
  }
  if (from_iteration >= before.total_iterations()) {
    // Training is over: nothing left to hand out.
    segments_.push_back(MakeSegment(from_iteration, epochs_, 0, 0,
                                    std::move(workers_per_rank)));
    return;
  }
  const Position at = before.Locate(before.last(), from_iteration);
  segments_.push_back(MakeSegment(from_iteration, at.epoch, at.first_partition,
                                  at.iteration_in_epoch,
                                  std::move(workers_per_rank)));
}

SchedulePlanner::Segment SchedulePlanner::MakeSegment(
    uint64_t first_iteration, uint64_t epoch, uint64_t first_partition,
    uint64_t epoch_offset, std::vector<int> workers_per_rank) const {
  STARLING_CHECK(!workers_per_rank.empty());
  Segment s;
  s.first_iteration = first_iteration;
  s.epoch = epoch;
  s.first_partition = first_partition;
  s.epoch_offset = epoch_offset;
  s.workers_per_rank = std::move(workers_per_rank);
  for (int workers : s.workers_per_rank) {
    STARLING_CHECK(workers >= 1) << "workers per rank " << workers;
    s.first_worker.push_back(s.total_workers);
    s.total_workers += static_cast<uint64_t>(workers);
  }
  s.iterations_per_epoch =
      (partitions_per_epoch_ + s.total_workers - 1) / s.total_workers;
  return s;
}

std::vector<proto::ScheduleSegment> SchedulePlanner::Segments() const {
  std::vector<proto::ScheduleSegment> out;
  for (const Segment& s : segments_) {
    proto::ScheduleSegment segment;
    segment.set_first_iteration(s.first_iteration);
    segment.set_epoch(s.epoch);
    segment.set_first_partition(s.first_partition);
    segment.set_epoch_offset(s.epoch_offset);
    for (int w : s.workers_per_rank) segment.add_workers_per_rank(w);
    out.push_back(std::move(segment));
  }
  return out;
}

bool SchedulePlanner::FromSegments(
    uint64_t partitions_per_epoch, uint64_t epochs, int iterations_per_schedule,
    const std::vector<proto::ScheduleSegment>& segments, SchedulePlanner* out) {
  if (segments.empty() || partitions_per_epoch < 1 || epochs < 1 ||
      iterations_per_schedule < 1) {
    return false;
  }
  SchedulePlanner planner(partitions_per_epoch, epochs,
                          iterations_per_schedule);
  for (const proto::ScheduleSegment& segment : segments) {
    if (segment.workers_per_rank().empty() ||
        segment.first_partition() >= partitions_per_epoch ||
        (!planner.segments_.empty() &&
         segment.first_iteration() <= planner.last().first_iteration)) {
      return false;
    }
    std::vector<int> workers(segment.workers_per_rank().begin(),
                             segment.workers_per_rank().end());
    if (std::any_of(workers.begin(), workers.end(),
                    [](int w) { return w < 1; })) {
      return false;
    }
    planner.segments_.push_back(planner.MakeSegment(
        segment.first_iteration(), segment.epoch(), segment.first_partition(),
        segment.epoch_offset(), std::move(workers)));
  }
  *out = std::move(planner);
  return true;
}

uint64_t SchedulePlanner::FirstEpochLength(const Segment& s) const {
  if (s.epoch >= epochs_) return 0;
  return (partitions_per_epoch_ - s.first_partition + s.total_workers - 1) /
         s.total_workers;
}

uint64_t SchedulePlanner::total_iterations() const {
  const Segment& s = last();
  if (s.epoch >= epochs_) return s.first_iteration;
  return s.first_iteration + FirstEpochLength(s) +
         (epochs_ - s.epoch - 1) * s.iterations_per_epoch;
}

const SchedulePlanner::Segment& SchedulePlanner::SegmentOf(
    uint64_t iteration) const {
  for (size_t i = segments_.size(); i-- > 1;) {
    if (segments_[i].first_iteration <= iteration) return segments_[i];
  }
  return segments_[0];
}

SchedulePlanner::Position SchedulePlanner::Locate(const Segment& s,
                                                  uint64_t iteration) const {
  Position p;
  const uint64_t first = FirstEpochLength(s);
  const uint64_t d = iteration - s.first_iteration;
  if (d < first) {
    p.epoch = s.epoch;
    p.iteration_in_epoch = s.epoch_offset + d;
    p.first_partition = s.first_partition + d * s.total_workers;
    p.epoch_iterations = s.epoch_offset + first;
    return p;
  }
  const uint64_t rest = d - first;
  p.epoch = s.epoch + 1 + rest / s.iterations_per_epoch;
  p.iteration_in_epoch = rest % s.iterations_per_epoch;
  p.first_partition = p.iteration_in_epoch * s.total_workers;
  p.epoch_iterations = s.iterations_per_epoch;
  return p;
}

uint64_t SchedulePlanner::EpochOf(uint64_t iteration) const {
  if (iteration >= total_iterations()) return epochs_;
  const Segment& s = SegmentOf(iteration);
  return std::min(Locate(s, iteration).epoch, epochs_);
}

proto::Schedule SchedulePlanner::Plan(int rank, uint64_t next_iteration) const {
  STARLING_CHECK(rank >= 0 && rank < ranks()) << "rank " << rank;
  const Segment& s = last();
  STARLING_CHECK(next_iteration >= s.first_iteration)
      << "iteration " << next_iteration << " was planned for an earlier group"
      << " (this plan begins at " << s.first_iteration << ")";
  const uint64_t total = total_iterations();
  const uint64_t count = next_iteration >= total
                             ? 0
                             : std::min<uint64_t>(iterations_per_schedule_,
                                                  total - next_iteration);
  const int local_workers = s.workers_per_rank[rank];

  proto::Schedule schedule;
  schedule.set_epoch(EpochOf(next_iteration));
  schedule.set_first_iteration(next_iteration);
  schedule.set_iteration_count(static_cast<int32_t>(count));
  schedule.set_done(next_iteration + count >= total);
  schedule.set_iterations_per_epoch(s.iterations_per_epoch);
  schedule.set_epochs(epochs_);
  schedule.set_partitions_per_epoch(partitions_per_epoch_);
  schedule.set_total_iterations(total);
  for (int local = 0; local < local_workers; ++local) {
    proto::PartitionAssignment* all = schedule.add_assignments();
    all->set_rank(rank);
    all->set_local_worker(local);
  }
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t global = next_iteration + j;
    const Position at = Locate(s, global);
    proto::ScheduledIteration* iteration = schedule.add_iterations();
    iteration->set_iteration(global);
    iteration->set_epoch(at.epoch);
    iteration->set_iteration_in_epoch(at.iteration_in_epoch);
    iteration->set_last_in_epoch(at.iteration_in_epoch + 1 ==
                                 at.epoch_iterations);
    for (int local = 0; local < local_workers; ++local) {
      const uint64_t partition =
          at.first_partition + s.first_worker[rank] + local;
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
