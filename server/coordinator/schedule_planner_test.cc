#include "server/coordinator/schedule_planner.h"

#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace starling {
namespace coordinator {
namespace {

TEST(SchedulePlanner, ReturnsKConsecutiveIterations) {
  SchedulePlanner planner(/*partitions_per_epoch=*/64, /*epochs=*/2,
                          /*iterations_per_schedule=*/4, {2, 2});
  EXPECT_EQ(planner.total_workers(), 4u);
  EXPECT_EQ(planner.iterations_per_epoch(), 16u);
  const proto::Schedule schedule = planner.Plan(1, 14);
  EXPECT_EQ(schedule.first_iteration(), 14u);
  EXPECT_EQ(schedule.iteration_count(), 4);
  EXPECT_EQ(schedule.epoch(), 0u);
  EXPECT_FALSE(schedule.done());
  ASSERT_EQ(schedule.iterations_size(), 4);
  // Crosses into epoch 1 at global iteration 16.
  const uint64_t expected[][3] = {
      {14, 0, 14}, {15, 0, 15}, {16, 1, 0}, {17, 1, 1}};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(schedule.iterations(j).iteration(), expected[j][0]);
    EXPECT_EQ(schedule.iterations(j).epoch(), expected[j][1]);
    EXPECT_EQ(schedule.iterations(j).iteration_in_epoch(), expected[j][2]);
    ASSERT_EQ(schedule.iterations(j).assignments_size(), 2);
  }
  // Rank 1's workers are global workers 2 and 3.
  EXPECT_EQ(schedule.iterations(2).assignments(0).partitions(0), 2u);
  EXPECT_EQ(schedule.iterations(2).assignments(1).partitions(0), 3u);
  ASSERT_EQ(schedule.assignments_size(), 2);
  EXPECT_EQ(schedule.assignments(1).local_worker(), 1);
  EXPECT_EQ(schedule.assignments(1).partitions_size(), 4);
}

// Every partition of every epoch is read by exactly one worker, for group
// shapes where P is and is not a multiple of the worker count.
TEST(SchedulePlanner, PartitionsCoverEachEpochExactlyOnce) {
  struct Case {
    uint64_t partitions;
    std::vector<int> workers;
    int k;
  };
  for (const Case& c :
       {Case{64, {1, 1, 1, 1}, 16}, Case{10, {3, 1}, 3}, Case{7, {2, 2, 2}, 5},
        Case{3, {4}, 16}, Case{100, {1, 2, 3, 4, 5}, 7}}) {
    const uint64_t epochs = 3;
    SchedulePlanner planner(c.partitions, epochs, c.k, c.workers);
    std::map<uint64_t, std::multiset<uint64_t>> read;  // epoch -> partitions
    for (int rank = 0; rank < planner.ranks(); ++rank) {
      uint64_t next = 0;
      for (int calls = 0;; ++calls) {
        ASSERT_LT(calls, 1000) << "schedule never finished";
        const proto::Schedule s = planner.Plan(rank, next);
        ASSERT_EQ(s.first_iteration(), next);
        for (const proto::ScheduledIteration& it : s.iterations()) {
          EXPECT_EQ(it.iteration(), next++);
          for (const proto::PartitionAssignment& a : it.assignments()) {
            EXPECT_EQ(a.rank(), rank);
            read[it.epoch()].insert(a.partitions().begin(),
                                    a.partitions().end());
          }
        }
        if (s.done()) break;
        EXPECT_EQ(s.iteration_count(), c.k);
      }
      EXPECT_EQ(next, planner.total_iterations());
    }
    ASSERT_EQ(read.size(), epochs);
    for (const auto& [epoch, partitions] : read) {
      ASSERT_EQ(partitions.size(), c.partitions) << "epoch " << epoch;
      uint64_t expected = 0;
      for (uint64_t p : partitions) EXPECT_EQ(p, expected++);
    }
  }
}

TEST(SchedulePlanner, DoneAfterTheLastEpoch) {
  SchedulePlanner planner(8, 2, 16, {1, 1});
  ASSERT_EQ(planner.total_iterations(), 8u);
  proto::Schedule last = planner.Plan(0, 0);
  EXPECT_EQ(last.iteration_count(), 8);
  EXPECT_TRUE(last.done());
  proto::Schedule after = planner.Plan(0, 8);
  EXPECT_EQ(after.iteration_count(), 0);
  EXPECT_TRUE(after.done());
  EXPECT_EQ(after.epoch(), 2u);
}

// Workers turn partition ids into samples with partitions_per_epoch, so
// every schedule carries it, the empty one after training included.
TEST(SchedulePlanner, FillsPartitionsPerEpochAndEpochShape) {
  SchedulePlanner planner(/*partitions_per_epoch=*/10, /*epochs=*/3,
                          /*iterations_per_schedule=*/4, {3, 1});
  EXPECT_EQ(planner.partitions_per_epoch(), 10u);
  for (uint64_t next : {uint64_t{0}, uint64_t{5}, planner.total_iterations()}) {
    for (int rank = 0; rank < planner.ranks(); ++rank) {
      const proto::Schedule s = planner.Plan(rank, next);
      EXPECT_EQ(s.partitions_per_epoch(), 10u) << rank << " " << next;
      EXPECT_EQ(s.iterations_per_epoch(), 3u);
      EXPECT_EQ(s.epochs(), 3u);
      for (const proto::ScheduledIteration& it : s.iterations()) {
        for (const proto::PartitionAssignment& a : it.assignments()) {
          for (uint64_t p : a.partitions())
            EXPECT_LT(p, s.partitions_per_epoch());
        }
      }
    }
  }
}

// Every iteration every rank of `planner` is handed from `from` on: the
// partitions each epoch reads (epoch -> partitions), and the iterations
// that end an epoch.
void ReadFrom(const SchedulePlanner& planner, uint64_t from,
              std::map<uint64_t, std::multiset<uint64_t>>* read,
              std::set<uint64_t>* epoch_ends) {
  for (int rank = 0; rank < planner.ranks(); ++rank) {
    uint64_t next = from;
    for (int calls = 0;; ++calls) {
      ASSERT_LT(calls, 1000) << "schedule never finished";
      const proto::Schedule s = planner.Plan(rank, next);
      EXPECT_EQ(s.total_iterations(), planner.total_iterations());
      for (const proto::ScheduledIteration& it : s.iterations()) {
        EXPECT_EQ(it.iteration(), next++);
        if (it.last_in_epoch()) epoch_ends->insert(it.iteration());
        for (const proto::PartitionAssignment& a : it.assignments()) {
          (*read)[it.epoch()].insert(a.partitions().begin(),
                                     a.partitions().end());
        }
      }
      if (s.done()) break;
    }
    EXPECT_EQ(next, planner.total_iterations());
  }
}

// The group re-forms while the run goes on from iteration F: the old
// group read its share up to F, the new one the rest of that epoch and
// the later epochs; every partition of every epoch is still read exactly
// once, and each epoch has exactly one last iteration.
TEST(SchedulePlanner, AGroupThatReFormsMidEpochReadsEachPartitionOnce) {
  struct Case {
    uint64_t partitions;
    std::vector<int> before, after;
    uint64_t from;
  };
  for (const Case& c :
       {Case{64, {1, 1, 1, 1}, {1, 1, 1}, 5},
        Case{64, {1, 1, 1, 1}, {1, 1, 1, 1, 1}, 17}, Case{10, {3, 1}, {2}, 1},
        Case{7, {2, 2, 2}, {1}, 2}, Case{100, {1, 2, 3, 4, 5}, {2, 3}, 0},
        Case{100, {4, 4}, {1, 1, 1}, 13}, Case{9, {1, 1, 1}, {1, 1}, 3}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.partitions << " partitions, from " << c.from);
    const uint64_t epochs = 3;
    const SchedulePlanner before(c.partitions, epochs, 4, c.before);
    const SchedulePlanner after(before, c.from, c.after);
    EXPECT_EQ(after.first_iteration(), c.from);
    EXPECT_EQ(after.total_workers(), static_cast<uint64_t>(std::accumulate(
                                         c.after.begin(), c.after.end(), 0)));
    std::map<uint64_t, std::multiset<uint64_t>> read;
    std::set<uint64_t> ends;
    // The old group's iterations before F.
    for (int rank = 0; rank < before.ranks(); ++rank) {
      for (uint64_t t = 0; t < c.from; ++t) {
        const proto::Schedule one = before.Plan(rank, t);
        ASSERT_GT(one.iterations_size(), 0);
        const proto::ScheduledIteration& it = one.iterations(0);
        if (rank == 0 && it.last_in_epoch()) ends.insert(t);
        for (const proto::PartitionAssignment& a : it.assignments()) {
          read[it.epoch()].insert(a.partitions().begin(), a.partitions().end());
        }
      }
    }
    ReadFrom(after, c.from, &read, &ends);
    ASSERT_EQ(read.size(), epochs);
    for (const auto& [epoch, partitions] : read) {
      ASSERT_EQ(partitions.size(), c.partitions) << "epoch " << epoch;
      uint64_t expected = 0;
      for (uint64_t p : partitions) EXPECT_EQ(p, expected++);
    }
    EXPECT_EQ(ends.size(), epochs);
    EXPECT_EQ(*ends.rbegin() + 1, after.total_iterations());
    EXPECT_EQ(after.EpochOf(after.total_iterations()), epochs);
  }
}

TEST(SchedulePlanner, SegmentsRecordAndRestoreThePlan) {
  const SchedulePlanner first(64, 2, 4, {2, 2});
  const SchedulePlanner second(first, 6, {1, 2, 1, 1});
  const SchedulePlanner third(second, 20, {3});
  const std::vector<proto::ScheduleSegment> segments = third.Segments();
  ASSERT_EQ(segments.size(), 3u);
  SchedulePlanner restored(1, 1, 1, {1});
  ASSERT_TRUE(SchedulePlanner::FromSegments(64, 2, 4, segments, &restored));
  EXPECT_EQ(restored.total_iterations(), third.total_iterations());
  for (uint64_t t : {uint64_t{20}, uint64_t{25}, uint64_t{31}}) {
    EXPECT_EQ(restored.Plan(0, t).SerializeAsString(),
              third.Plan(0, t).SerializeAsString());
  }
  // Out of order, or partitions past the epoch: no plan.
  std::vector<proto::ScheduleSegment> bad = segments;
  std::swap(bad[1], bad[2]);
  EXPECT_FALSE(SchedulePlanner::FromSegments(64, 2, 4, bad, &restored));
  bad = segments;
  bad[1].set_first_partition(64);
  EXPECT_FALSE(SchedulePlanner::FromSegments(64, 2, 4, bad, &restored));
  EXPECT_FALSE(SchedulePlanner::FromSegments(64, 2, 4, {}, &restored));
}

// Continued past the end of training: nothing is left to read.
TEST(SchedulePlanner, AGroupThatReFormsAfterTheLastIterationReadsNothing) {
  const SchedulePlanner before(8, 2, 4, {1, 1});
  const SchedulePlanner after(before, before.total_iterations(), {1});
  EXPECT_EQ(after.total_iterations(), before.total_iterations());
  const proto::Schedule s = after.Plan(0, after.total_iterations());
  EXPECT_EQ(s.iteration_count(), 0);
  EXPECT_TRUE(s.done());
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
