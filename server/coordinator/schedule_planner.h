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
// A group that re-forms while a run goes on (a lost daemon's run carried
// on) continues the plan: from the iteration the run goes on at, the
// partitions of that epoch not yet handed out are read by the new group's
// workers round-robin in the same way (so every partition of the epoch is
// still read exactly once, the epoch just has another number of
// iterations), and the later epochs are planned for the new group. Each
// such change begins a *segment* of the plan; Plan() serves the last one.
//
// Immutable after construction; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_
#define STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_

#include <cstdint>
#include <vector>

#include "proto/coordinator.pb.h"
#include "proto/coordinator_state.pb.h"

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

  // `before`'s plan up to `from_iteration`; from there the partitions of
  // that iteration's epoch that `before` had not handed out before it,
  // then whole epochs, for the workers of `workers_per_rank` (the group
  // re-formed while the run went on from `from_iteration`). REQUIRES:
  // from_iteration >= before.first_iteration(); workers_per_rank as above.
  SchedulePlanner(const SchedulePlanner& before, uint64_t from_iteration,
                  std::vector<int> workers_per_rank);

  // The segments (for the coordinator's record) and a planner made of them
  // again; false if they do not make a plan (none, or out of order).
  std::vector<proto::ScheduleSegment> Segments() const;
  static bool FromSegments(uint64_t partitions_per_epoch, uint64_t epochs,
                           int iterations_per_schedule,
                           const std::vector<proto::ScheduleSegment>& segments,
                           SchedulePlanner* out);

  uint64_t partitions_per_epoch() const { return partitions_per_epoch_; }
  uint64_t epochs() const { return epochs_; }
  // Of the last segment: its workers, its whole epochs' iterations, ranks.
  uint64_t total_workers() const { return last().total_workers; }
  uint64_t iterations_per_epoch() const { return last().iterations_per_epoch; }
  int ranks() const { return static_cast<int>(last().workers_per_rank.size()); }
  // Iterations of the whole plan; the first one the last segment plans.
  uint64_t total_iterations() const;
  uint64_t first_iteration() const { return last().first_iteration; }
  // Whether the plan continues an earlier group's (more than one segment).
  bool continued() const { return segments_.size() > 1; }
  // The epoch `iteration` is in (epochs() once past the end).
  uint64_t EpochOf(uint64_t iteration) const;

  // The schedule of `rank` from `next_iteration`: K iterations, fewer only
  // at the end of training (none once next_iteration >= total_iterations()),
  // with done set when nothing follows; partitions_per_epoch, epochs,
  // iterations_per_epoch (the last segment's whole epochs) and
  // total_iterations are filled whatever the count, and each iteration
  // says whether it ends its epoch. REQUIRES: 0 <= rank < ranks(),
  // next_iteration >= first_iteration().
  proto::Schedule Plan(int rank, uint64_t next_iteration) const;

 private:
  struct Segment {
    uint64_t first_iteration = 0;
    // The epoch first_iteration is in, its first partition handed out here
    // and its iterations before first_iteration.
    uint64_t epoch = 0;
    uint64_t first_partition = 0;
    uint64_t epoch_offset = 0;
    std::vector<int> workers_per_rank;
    // first_worker[r]: global number of rank r's local worker 0.
    std::vector<uint64_t> first_worker;
    uint64_t total_workers = 0;
    uint64_t iterations_per_epoch = 0;  // of a whole epoch
  };
  // Where an iteration falls.
  struct Position {
    uint64_t epoch = 0;
    uint64_t iteration_in_epoch = 0;
    uint64_t first_partition = 0;   // worker 0's
    uint64_t epoch_iterations = 0;  // iterations of that epoch in all
  };

  SchedulePlanner(uint64_t partitions_per_epoch, uint64_t epochs,
                  int iterations_per_schedule);
  Segment MakeSegment(uint64_t first_iteration, uint64_t epoch,
                      uint64_t first_partition, uint64_t epoch_offset,
                      std::vector<int> workers_per_rank) const;
  const Segment& last() const { return segments_.back(); }
  const Segment& SegmentOf(uint64_t iteration) const;
  // The segment's iterations left in the epoch it begins in.
  uint64_t FirstEpochLength(const Segment& s) const;
  Position Locate(const Segment& s, uint64_t iteration) const;

  uint64_t partitions_per_epoch_;
  uint64_t epochs_;
  int iterations_per_schedule_;
  std::vector<Segment> segments_;  // by first_iteration; never empty
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_SCHEDULE_PLANNER_H_
