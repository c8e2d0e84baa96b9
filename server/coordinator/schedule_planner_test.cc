#include "server/coordinator/schedule_planner.h"

#include <map>
#include <set>

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

}  // namespace
}  // namespace coordinator
}  // namespace starling
