// A run of the synchronous step going on without a lost daemon
// (continuation.h): N daemons' data paths on loopback take k whole steps and
// stop step k + 1 at chosen points; the survivors form a group of N - 1,
// agree on the version, and end with every shard's master and optimizer
// state bit for bit those of a fault-free run at that version, the same
// parameters everywhere, and each new buddy holding its owner's shard.
#include "server/node/sync/continuation.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/common.pb.h"
#include "server/base/durable_file.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/run/run_factory.h"
#include "server/node/sync/checkpoint.h"
#include "server/node/sync/step_data_path.h"
#include "server/node/sync/sync_run.h"
#include "server/node/sync/sync_test_util.h"
#include "server/node/telemetry/node_metrics.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;

// The reduced gradient of flat element i in step `step` (the same whoever
// owns i, so that the reference does not depend on the group).
float Gradient(int64_t step, uint64_t i) {
  return std::sin(0.001f * static_cast<float>(i) +
                  0.13f * static_cast<float>(step));
}

// How far a rank got into step k + 1 when the group lost a daemon.
enum class Reached {
  kNothing,   // before its update
  kUpdated,   // its master updated (the all-gather cut short)
  kShifted,   // all-gathered and shifted to its buddy, barrier not passed
  kCommitted  // the whole step, its replica updated
};

struct Scenario {
  std::string name;
  int ranks;
  int distance;
  std::string optimizer;
  proto::DataType dtype;
  std::vector<int> lost;  // old ranks
  // For step k + 1 (every rank alike; kUpdated applies to `updated` ranks
  // only, the others reached nothing).
  Reached reached;
  std::vector<int> updated;
  // The version the survivors must go on from; -1: the run cannot go on.
  int64_t expect_version;
};

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

constexpr int64_t kSteps = 3;  // k

RunFactoryOptions OptionsFor(const Scenario& c, int ranks, int rank,
                             int distance) {
  RunFactoryOptions options;
  options.run_id = 7;
  options.total_workers = ranks;
  options.ranks = ranks;
  options.rank = rank;
  options.optimizer = c.optimizer;
  options.learning_rate = 0.05f;
  options.buddy_distance = distance;
  return options;
}

void SetGradients(SyncRun& run, int64_t step) {
  for (const Bucket& b : run.buckets) {
    for (uint64_t i = b.owned_begin; i < b.owned_end; ++i) {
      run.master_gradients[b.master_offset + (i - b.owned_begin)] =
          Gradient(step, i);
    }
  }
}

// Each rank's master and state written into full vectors (flat order).
struct Full {
  std::vector<float> master;
  std::vector<float> state;
};
void AddShard(const SyncRun& run, Full* full) {
  const uint64_t n = run.layout.total_elements;
  const size_t shard = run.master.size();
  const absl::Span<const float> state = run.optimizer->state();
  const size_t slots = shard == 0 ? 0 : state.size() / shard;
  if (full->master.empty()) full->master.assign(n, 0.0f);
  if (full->state.size() < slots * n) full->state.assign(slots * n, 0.0f);
  for (const Bucket& b : run.buckets) {
    for (uint64_t i = b.owned_begin; i < b.owned_end; ++i) {
      const size_t j = b.master_offset + (i - b.owned_begin);
      full->master[i] = run.master[j];
      for (size_t s = 0; s < slots; ++s) {
        full->state[s * n + i] = state[s * shard + j];
      }
    }
  }
}

// Rank `rank`'s run of the old group, at version 0.
absl::StatusOr<std::shared_ptr<SyncRun>> StartRank(const Scenario& c,
                                                   int rank) {
  return StartRunAtVersion0(ThreeTensors(c.dtype, {700, 29, 3001}),
                            OptionsFor(c, c.ranks, rank, c.distance));
}

// Every rank's run on `c.ranks` loopback daemons, started at version 0,
// after `steps(rank, run, path)` ran on it (each rank with its own metrics
// and data path); null for a rank whose steps failed.
std::vector<std::shared_ptr<SyncRun>> OnEveryRank(
    const Scenario& c,
    const std::function<absl::Status(int rank, SyncRun& run,
                                     StepDataPath& path)>& steps) {
  std::vector<std::shared_ptr<SyncRun>> runs(c.ranks);
  EXPECT_OK(collective::FirstError(collective::RunOnLoopback(
      c.ranks, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        metrics::MetricsRegistry registry;
        absl::StatusOr<NodeMetrics> metrics = NodeMetrics::Register(&registry);
        if (!metrics.ok()) return metrics.status();
        absl::StatusOr<std::shared_ptr<SyncRun>> created = StartRank(c, rank);
        if (!created.ok()) return created.status();
        StepDataPath path(comm, &*metrics);
        const absl::Status stepped = steps(rank, **created, path);
        if (!stepped.ok()) return stepped;
        runs[rank] = *created;
        return absl::OkStatus();
      })));
  return runs;
}

// A fault-free run of `versions` steps on `c.ranks` daemons: the full
// master and state after it, and the parameters.
Full Reference(const Scenario& c, int64_t versions,
               std::vector<float>* params) {
  const std::vector<std::shared_ptr<SyncRun>> runs =
      OnEveryRank(c, [&](int, SyncRun& run, StepDataPath& path) {
        for (int64_t step = 0; step < versions; ++step) {
          SetGradients(run, step);
          absl::Status s =
              path.UpdateAndGather(run, step, collective::CallOptions());
          if (!s.ok()) return s;
        }
        return absl::OkStatus();
      });
  Full full;
  for (const auto& run : runs) {
    if (run != nullptr) AddShard(*run, &full);
  }
  if (runs[0] != nullptr) {
    const absl::Span<const float> p = runs[0]->store->parameters();
    params->assign(p.begin(), p.end());
  }
  return full;
}

// Every shard's master and optimizer state of `resumed`, gathered, must
// be bit for bit those of a fault-free run of `versions` steps; `*params`
// gets that run's parameters.
void ExpectReference(const Scenario& c, int64_t versions,
                     const std::vector<std::shared_ptr<SyncRun>>& resumed,
                     std::vector<float>* params) {
  const Full want = Reference(c, versions, params);
  Full got;
  for (const auto& run : resumed) AddShard(*run, &got);
  ASSERT_EQ(got.master.size(), want.master.size());
  EXPECT_EQ(std::memcmp(got.master.data(), want.master.data(),
                        want.master.size() * sizeof(float)),
            0);
  ASSERT_EQ(got.state.size(), want.state.size());
  EXPECT_EQ(std::memcmp(got.state.data(), want.state.data(),
                        want.state.size() * sizeof(float)),
            0);
}

// Every daemon of the new group (`from`: its old rank, -1 where it joined;
// empty: all survivors) went on at `version`: the run counts one worker per
// daemon, every daemon holds `params`, and each replica is bit for bit its
// owner's shard and state.
void ExpectGoneOn(const std::vector<std::shared_ptr<SyncRun>>& resumed,
                  const std::vector<float>& params, int64_t version,
                  const std::vector<int>& from) {
  const int n = static_cast<int>(resumed.size());
  for (int r = 0; r < n; ++r) {
    const bool joined = !from.empty() && from[r] < 0;
    SCOPED_TRACE(absl::StrCat("new rank ", r, joined ? " (joined)" : ""));
    const SyncRun& run = *resumed[r];
    EXPECT_EQ(run.total_workers, n);
    EXPECT_EQ(run.master_version, version);
    const absl::Span<const float> p = run.store->parameters();
    ASSERT_EQ(p.size(), params.size());
    EXPECT_EQ(std::memcmp(p.data(), params.data(), p.size() * sizeof(float)),
              0);
    if (n > 1) {
      ASSERT_NE(run.replica, nullptr);
      const SyncRun& owner = *resumed[run.replica->of_rank];
      EXPECT_EQ(run.replica->master, owner.master);
      const absl::Span<const float> a = run.replica->optimizer->state();
      const absl::Span<const float> b = owner.optimizer->state();
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end()));
      EXPECT_EQ(run.replica->version, version);
    }
  }
}

// The old group: k whole steps, then step k + 1 as far as the scenario says.
std::vector<std::shared_ptr<SyncRun>> OldGroup(const Scenario& c) {
  return OnEveryRank(c, [&](int rank, SyncRun& run, StepDataPath& path) {
    if (run.replica == nullptr) return absl::InternalError("no replica");
    const collective::CallOptions call;
    for (int64_t step = 0; step <= kSteps; ++step) {
      SetGradients(run, step);
      const bool last = step == kSteps;
      if (last && c.reached == Reached::kNothing) break;
      if (last && c.reached == Reached::kUpdated) {
        bool mine = false;
        for (int u : c.updated) mine |= u == rank;
        if (mine) {
          absl::Status s = path.UpdateMaster(run, step);
          if (!s.ok()) return s;
        }
        break;
      }
      absl::Status s = path.UpdateAndGather(run, step, call);
      if (!s.ok()) return s;
      s = path.HandToBuddy(run, step, call);
      if (!s.ok()) return s;
      if (last && c.reached == Reached::kShifted) break;
      s = path.UpdateReplica(run, step);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

class ContinuationTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(ContinuationTest, SurvivorsGoOnBitForBitFromTheAgreedVersion) {
  const Scenario& c = GetParam();
  std::vector<std::shared_ptr<SyncRun>> old = OldGroup(c);
  std::vector<int> survivors;
  for (int r = 0; r < c.ranks; ++r) {
    bool lost = false;
    for (int l : c.lost) lost |= l == r;
    if (!lost) survivors.push_back(r);
  }
  const int n = static_cast<int>(survivors.size());
  const int distance = n > 1 ? 1 : 0;
  std::vector<std::shared_ptr<SyncRun>> resumed(n);
  std::vector<int64_t> versions(n, -2);
  std::vector<absl::Status> errors = collective::RunOnLoopback(
      n, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        int64_t version = -1;
        absl::StatusOr<std::shared_ptr<SyncRun>> run = ContinueRun(
            old[survivors[rank]], survivors[rank], c.ranks, 1,
            /*checkpoints=*/nullptr, OptionsFor(c, n, rank, distance), comm,
            collective::CallOptions(), &version);
        if (!run.ok()) return run.status();
        resumed[rank] = *run;
        versions[rank] = version;
        return absl::OkStatus();
      });
  if (c.expect_version < 0) {
    for (const absl::Status& e : errors) {
      EXPECT_THAT(e, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("cannot go on")));
    }
    return;
  }
  for (int r = 0; r < n; ++r) {
    ASSERT_OK(errors[r]);
    EXPECT_EQ(versions[r], c.expect_version) << "rank " << r;
  }
  std::vector<float> params;
  ExpectReference(c, c.expect_version, resumed, &params);
  ExpectGoneOn(resumed, params, c.expect_version, {});
}

INSTANTIATE_TEST_SUITE_P(
    Faults, ContinuationTest,
    ::testing::Values(Scenario{"LostBeforeTheUpdate",
                               3,
                               1,
                               "adam",
                               proto::DATA_TYPE_FLOAT32,
                               {1},
                               Reached::kNothing,
                               {},
                               kSteps},
                      Scenario{"SomeUpdatedNoneCommittedRollsBack",
                               4,
                               1,
                               "momentum",
                               proto::DATA_TYPE_FLOAT32,
                               {2},
                               Reached::kUpdated,
                               {0, 1},
                               kSteps},
                      Scenario{"TheLostRanksOwnerUpdatedRollsBack",
                               3,
                               1,
                               "adam",
                               proto::DATA_TYPE_FLOAT32,
                               {1},
                               Reached::kUpdated,
                               {0},
                               kSteps},
                      Scenario{"ShiftedEverywhereRollsForward",
                               4,
                               2,
                               "adam",
                               proto::DATA_TYPE_FLOAT32,
                               {3},
                               Reached::kShifted,
                               {},
                               kSteps + 1},
                      Scenario{"CommittedStaysCommitted",
                               5,
                               1,
                               "sgd",
                               proto::DATA_TYPE_FLOAT32,
                               {0},
                               Reached::kCommitted,
                               {},
                               kSteps + 1},
                      Scenario{"SixteenBitWire",
                               3,
                               1,
                               "adam",
                               proto::DATA_TYPE_BFLOAT16,
                               {2},
                               Reached::kShifted,
                               {},
                               kSteps + 1},
                      Scenario{"TwoNonBuddiesLost",
                               5,
                               1,
                               "momentum",
                               proto::DATA_TYPE_FLOAT16,
                               {1, 3},
                               Reached::kCommitted,
                               {},
                               kSteps + 1},
                      Scenario{"ARankAndItsBuddyLostCannotGoOn",
                               4,
                               1,
                               "adam",
                               proto::DATA_TYPE_FLOAT32,
                               {1, 2},
                               Reached::kCommitted,
                               {},
                               -1},
                      Scenario{"DownToOne",
                               2,
                               1,
                               "momentum",
                               proto::DATA_TYPE_FLOAT32,
                               {0},
                               Reached::kShifted,
                               {},
                               kSteps + 1}),
    [](const ::testing::TestParamInfo<Scenario>& info) {
      return info.param.name;
    });

// Durable checkpoints: where no survivor holds a lost shard (a rank and
// its buddy lost together, or no replicas), the survivors go on from the
// newest version every rank wrote, bit for bit the fault-free run of that
// many steps; a damaged file fails the run on every survivor, named.
struct FromDisk {
  std::string name;
  int ranks;
  int distance;  // 0: no replicas
  std::vector<int> lost;
  // What happens to the checkpoint after it is written.
  enum class Damage { kNone, kFlipByte, kNoneWritten } damage;
};

void PrintTo(const FromDisk& s, std::ostream* os) { *os << s.name; }

class FromCheckpointTest : public ::testing::TestWithParam<FromDisk> {};

constexpr int64_t kCheckpointed = 2;  // the version written to disk

TEST_P(FromCheckpointTest, SurvivorsGoOnFromTheNewestWholeVersion) {
  const FromDisk& d = GetParam();
  const Scenario c{d.name,
                   d.ranks,
                   d.distance,
                   "adam",
                   proto::DATA_TYPE_FLOAT32,
                   d.lost,
                   Reached::kCommitted,
                   {},
                   kCheckpointed};
  const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/from-checkpoint-", d.name);
  std::filesystem::remove_all(root);
  const CheckpointFolder folder(root, 7);
  // The old group: k + 1 whole steps, each rank writing version 2.
  std::vector<std::shared_ptr<SyncRun>> old =
      OnEveryRank(c, [&](int rank, SyncRun& run, StepDataPath& path) {
        const collective::CallOptions call;
        for (int64_t step = 0; step <= kSteps; ++step) {
          SetGradients(run, step);
          absl::Status s = path.UpdateAndGather(run, step, call);
          if (!s.ok()) return s;
          if (run.replica != nullptr) {
            s = path.HandToBuddy(run, step, call);
            if (!s.ok()) return s;
            s = path.UpdateReplica(run, step);
            if (!s.ok()) return s;
          }
          if (step + 1 == kCheckpointed &&
              d.damage != FromDisk::Damage::kNoneWritten) {
            s = folder.Write(CheckpointOf(run, rank, c.ranks, 1, "adam"));
            if (!s.ok()) return s;
          }
        }
        return absl::OkStatus();
      });
  const std::string damaged = folder.PathOf(kCheckpointed, 1, 0, c.ranks);
  if (d.damage == FromDisk::Damage::kFlipByte) {
    absl::StatusOr<std::string> bytes = ReadWholeFile(damaged, "test");
    ASSERT_OK(bytes.status());
    std::string flipped = *bytes;
    flipped[flipped.size() - 33] ^= 0x40;
    ASSERT_OK(WriteFileDurably(damaged, flipped));
  }
  std::vector<int> survivors;
  for (int r = 0; r < c.ranks; ++r) {
    if (std::find(d.lost.begin(), d.lost.end(), r) == d.lost.end()) {
      survivors.push_back(r);
    }
  }
  const int n = static_cast<int>(survivors.size());
  std::vector<std::shared_ptr<SyncRun>> resumed(n);
  std::vector<std::optional<WholeVersion>> restored(n);
  std::vector<absl::Status> errors = collective::RunOnLoopback(
      n, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        int64_t version = -1;
        absl::StatusOr<std::shared_ptr<SyncRun>> run = ContinueRun(
            old[survivors[rank]], survivors[rank], c.ranks, 1, &folder,
            OptionsFor(c, n, rank, n > 1 && d.distance > 0 ? 1 : 0), comm,
            collective::CallOptions(), &version, &restored[rank]);
        if (!run.ok()) return run.status();
        if (version != kCheckpointed) {
          return absl::InternalError(absl::StrCat("went on from ", version));
        }
        resumed[rank] = *run;
        return absl::OkStatus();
      });
  if (d.damage == FromDisk::Damage::kFlipByte) {
    // Old rank 0's file is read by new rank 0, which names it; the other
    // survivors name the rank that could not read its part.
    EXPECT_THAT(errors[0],
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr(absl::StrCat(damaged,
                                                " is not whole (its SHA-256 "
                                                "does not match)"))));
    for (int r = 1; r < n; ++r) {
      EXPECT_THAT(errors[r],
                  StatusIs(absl::StatusCode::kDataLoss,
                           HasSubstr("rank 0 of the new group could not read "
                                     "its part")));
    }
    return;
  }
  if (d.damage == FromDisk::Damage::kNoneWritten) {
    for (const absl::Status& e : errors) {
      EXPECT_THAT(e, StatusIs(absl::StatusCode::kFailedPrecondition,
                              HasSubstr("sees no version of it checkpointed "
                                        "whole")));
    }
    return;
  }
  for (int r = 0; r < n; ++r) {
    ASSERT_OK(errors[r]);
    ASSERT_TRUE(restored[r].has_value());
    EXPECT_EQ(restored[r]->version, kCheckpointed);
    EXPECT_EQ(restored[r]->ranks, c.ranks);
  }
  std::vector<float> params;
  ExpectReference(c, kCheckpointed, resumed, &params);
  for (int r = 0; r < n; ++r) {
    const absl::Span<const float> p = resumed[r]->store->parameters();
    ASSERT_EQ(p.size(), params.size());
    EXPECT_EQ(std::memcmp(p.data(), params.data(), p.size() * sizeof(float)), 0)
        << "new rank " << r;
    EXPECT_EQ(resumed[r]->master_version, kCheckpointed);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, FromCheckpointTest,
    ::testing::Values(
        FromDisk{"ARankAndItsBuddyLost", 4, 1, {1, 2}, FromDisk::Damage::kNone},
        FromDisk{"NoReplicasOneLost", 3, 0, {2}, FromDisk::Damage::kNone},
        FromDisk{"ThreeOfFiveLost", 5, 1, {0, 1, 3}, FromDisk::Damage::kNone},
        FromDisk{"ADamagedFileFailsEverySurvivor",
                 4,
                 1,
                 {1, 2},
                 FromDisk::Damage::kFlipByte},
        FromDisk{"NoneWrittenCannotGoOn",
                 4,
                 1,
                 {1, 2},
                 FromDisk::Damage::kNoneWritten}),
    [](const ::testing::TestParamInfo<FromDisk>& info) {
      return info.param.name;
    });

TEST(PlanResume, NamesADaemonThatCarriesAnotherRun) {
  CarryAccount a;
  a.run_id = 7;
  a.old_rank = 0;
  a.old_size = 2;
  CarryAccount b = a;
  b.run_id = 8;
  b.old_rank = 1;
  EXPECT_THAT(PlanResume(7, {a, b}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("rank 1 of the new group carries run 8, not "
                                 "run 7")));
}

TEST(PlanResume, NoDaemonOfTheOldGroupCannotCarryIt) {
  const CarryAccount joins = AccountOf(nullptr, 7, 0, 2, 1);
  EXPECT_THAT(PlanResume(7, {joins, joins}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no daemon of the new group (2) holds state "
                                 "of run 7: every one joins it")));
}

TEST(PlanResume, ADaemonThatJoinsHoldsNoShardAndItsWorkersCount) {
  CarryAccount a;
  a.run_id = 7;
  a.old_rank = 0;
  a.old_size = 2;
  a.master_version = 5;
  a.replica_of = 1;
  a.replica_version = 5;
  a.local_workers = 2;
  a.elements = 100;
  CarryAccount b = a;
  b.old_rank = 1;
  b.replica_of = 0;
  // The daemon restarted in between (old rank -1 whatever it was told).
  const CarryAccount joins = AccountOf(nullptr, 7, 1, 2, 3);
  absl::StatusOr<ResumePlan> plan = PlanResume(7, {joins, a, b});
  ASSERT_OK(plan);
  EXPECT_EQ(plan->version, 5);
  EXPECT_EQ(plan->source, (std::vector<int>{1, 2}));
  EXPECT_EQ(plan->joining, 1);
  EXPECT_EQ(plan->total_workers, 7);
  EXPECT_EQ(plan->elements, 100);
}

// Optimizer "none": no replicas, two of four old ranks lost (a rank and
// what would be its buddy): a stateful run could not go on, a plain
// all-reduce run goes on at the newest version from the first carrier.
TEST(PlanResume, AStatelessRunGoesOnWhoeverWasLost) {
  CarryAccount a;
  a.run_id = 7;
  a.old_size = 4;
  a.local_workers = 1;
  a.elements = 10;
  a.old_rank = 0;
  a.master_version = 3;
  CarryAccount b = a;
  b.old_rank = 3;
  b.master_version = 4;
  EXPECT_THAT(PlanResume(7, {a, b}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("cannot go on: no survivor holds")));
  absl::StatusOr<ResumePlan> plan = PlanResume(7, {a, b}, /*stateless=*/true);
  ASSERT_OK(plan);
  EXPECT_TRUE(plan->stateless);
  EXPECT_EQ(plan->version, 4);
  EXPECT_EQ(plan->source, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(plan->total_workers, 2);
  EXPECT_FALSE(plan->checkpoint.has_value());
}

// Daemons that join a running run (a restarted one, a newcomer) take part
// in the exchange with no state and end with their shards, their buddies'
// replicas and the parameters of the agreed version, bit for bit a
// fault-free run's, like the survivors.
struct Joining {
  std::string name;
  std::vector<int> lost;  // old ranks, of 4
  Reached reached;
  std::vector<int> updated;
  int joiners;
  int64_t expect_version;
};

void PrintTo(const Joining& j, std::ostream* os) { *os << j.name; }

class JoinTest : public ::testing::TestWithParam<Joining> {};

TEST_P(JoinTest, DaemonsThatJoinGetTheirStateBitForBit) {
  const Joining& j = GetParam();
  const Scenario c{
      j.name, 4,         1,         "adam",          proto::DATA_TYPE_FLOAT32,
      j.lost, j.reached, j.updated, j.expect_version};
  std::vector<std::shared_ptr<SyncRun>> old = OldGroup(c);
  // The new group: the survivors, then the daemons that join.
  std::vector<int> from;  // old rank, -1: joins
  for (int r = 0; r < c.ranks; ++r) {
    if (std::find(j.lost.begin(), j.lost.end(), r) == j.lost.end()) {
      from.push_back(r);
    }
  }
  for (int k = 0; k < j.joiners; ++k) from.push_back(-1);
  const int n = static_cast<int>(from.size());
  std::vector<std::shared_ptr<SyncRun>> resumed(n);
  std::vector<int64_t> versions(n, -2);
  std::vector<absl::Status> errors = collective::RunOnLoopback(
      n, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        const int o = from[rank];
        int64_t version = -1;
        absl::StatusOr<std::shared_ptr<SyncRun>> run =
            ContinueRun(o >= 0 ? old[o] : nullptr, o, o >= 0 ? c.ranks : 0, 1,
                        /*checkpoints=*/nullptr, OptionsFor(c, n, rank, 1),
                        comm, collective::CallOptions(), &version);
        if (!run.ok()) return run.status();
        resumed[rank] = *run;
        versions[rank] = version;
        return absl::OkStatus();
      });
  for (int r = 0; r < n; ++r) {
    ASSERT_OK(errors[r]) << "new rank " << r;
    EXPECT_EQ(versions[r], j.expect_version) << "new rank " << r;
  }
  std::vector<float> params;
  ExpectReference(c, j.expect_version, resumed, &params);
  ExpectGoneOn(resumed, params, j.expect_version, from);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(resumed[r]->layout.tensors.size(),
              old[from[0]]->layout.tensors.size());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Joins, JoinTest,
    ::testing::Values(
        // kill -9 and restart before the loss was acted on: one
        // re-formation drops the old self and takes the new one in.
        Joining{"ARestartedDaemonTakesItsShardFromItsBuddy",
                {2},
                Reached::kShifted,
                {},
                1,
                kSteps + 1},
        // Back to the whole group after a shrink, and one more.
        Joining{
            "TwoJoinAWholeGroup", {}, Reached::kCommitted, {}, 2, kSteps + 1},
        // A step cut short by the re-formation rolls back for everyone.
        Joining{"AStepCutShortRollsBack",
                {},
                Reached::kUpdated,
                {0, 3},
                1,
                kSteps}),
    [](const ::testing::TestParamInfo<Joining>& info) {
      return info.param.name;
    });

// A second daemon lost at the end of a continuation: the state moved on
// some daemons of the group and not on others, or moved everywhere but was
// not confirmed everywhere. Five daemons take kSteps + 1 whole steps; old
// rank 3 is lost and the other four (old ranks 0, 1, 2, 4: ranks 0-3 of
// the second group) move the state; then rank `lost` of the second group
// is lost too. Each daemon of the second group holds, as the third forms,
// one of: 'B' the first group's state only (its move failed), 'U' the
// first group's and beside it the second's, unconfirmed (its move ended,
// its confirmation did not), 'C' the second's only (it confirmed).
struct Unconfirmed {
  std::string name;
  std::string held;  // one letter per rank of the second group
  int lost;
  // Which state the third group goes on from (ChooseAndPlan's `which` of
  // its daemons: 0 held, 1 unconfirmed).
  std::vector<int> which;
};

void PrintTo(const Unconfirmed& u, std::ostream* os) { *os << u.name; }

class UnconfirmedTest : public ::testing::TestWithParam<Unconfirmed> {};

// A continuation on carried.size() loopback daemons: daemon r brings
// carried[r] as rank from[r] of sizes[r] (null: it joins).
struct Continued {
  std::vector<std::shared_ptr<SyncRun>> runs;
  std::vector<int64_t> versions;
  std::vector<absl::Status> errors;
};
Continued ContinueOn(const Scenario& c,
                     const std::vector<std::shared_ptr<SyncRun>>& carried,
                     const std::vector<int>& from,
                     const std::vector<int>& sizes) {
  const int n = static_cast<int>(carried.size());
  Continued out;
  out.runs.resize(n);
  out.versions.assign(n, -2);
  out.errors = collective::RunOnLoopback(
      n, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        int64_t version = -1;
        absl::StatusOr<std::shared_ptr<SyncRun>> run = ContinueRun(
            carried[rank], from[rank], sizes[rank], 1,
            /*checkpoints=*/nullptr, OptionsFor(c, n, rank, n > 1 ? 1 : 0),
            comm, collective::CallOptions(), &version);
        if (!run.ok()) return run.status();
        out.runs[rank] = *run;
        out.versions[rank] = version;
        return absl::OkStatus();
      });
  return out;
}

TEST_P(UnconfirmedTest, TheThirdGroupGoesOnFromAStateEveryCarrierHolds) {
  const Unconfirmed& u = GetParam();
  const Scenario c{u.name,
                   5,
                   1,
                   "momentum",
                   proto::DATA_TYPE_FLOAT32,
                   {3},
                   Reached::kCommitted,
                   {},
                   kSteps + 1};
  std::vector<std::shared_ptr<SyncRun>> old = OldGroup(c);
  const std::vector<int> first = {0, 1, 2, 4};
  std::vector<std::shared_ptr<SyncRun>> carried;
  for (int o : first) carried.push_back(old[o]);
  const Continued second = ContinueOn(c, carried, first, {5, 5, 5, 5});
  for (int r = 0; r < 4; ++r) ASSERT_OK(second.errors[r]) << "rank " << r;
  // What each daemon of the second group holds as the third forms.
  std::vector<int> from;
  std::vector<int> sizes;
  carried.clear();
  for (int r = 0; r < 4; ++r) {
    if (r == u.lost) continue;
    const std::shared_ptr<SyncRun>& base = old[first[r]];
    switch (u.held[r]) {
      case 'B':
        carried.push_back(base);
        from.push_back(first[r]);
        sizes.push_back(5);
        break;
      case 'U':
        base->successor = second.runs[r];
        base->successor_rank = r;
        base->successor_size = 4;
        carried.push_back(base);
        from.push_back(first[r]);
        sizes.push_back(5);
        break;
      default:
        carried.push_back(second.runs[r]);
        from.push_back(r);
        sizes.push_back(4);
    }
  }
  // Which state each brings.
  std::vector<std::pair<CarryAccount, CarryAccount>> states;
  for (size_t r = 0; r < carried.size(); ++r) {
    states.emplace_back(
        AccountOf(carried[r].get(), 7, from[r], sizes[r], 1),
        AccountOf(static_cast<SyncRun*>(carried[r]->successor.get()), 7,
                  carried[r]->successor_rank, carried[r]->successor_size, 1));
  }
  absl::StatusOr<SyncCarryChoice> choice = ChooseAndPlan(7, states);
  ASSERT_OK(choice);
  EXPECT_EQ(choice->which, u.which);
  EXPECT_EQ(choice->plan.version, kSteps + 1);

  const Continued third = ContinueOn(c, carried, from, sizes);
  for (int r = 0; r < 3; ++r) {
    ASSERT_OK(third.errors[r]) << "rank " << r;
    EXPECT_EQ(third.versions[r], kSteps + 1) << "rank " << r;
  }
  std::vector<float> params;
  ExpectReference(c, kSteps + 1, third.runs, &params);
  ExpectGoneOn(third.runs, params, kSteps + 1, {});
}

INSTANTIATE_TEST_SUITE_P(
    SecondLoss, UnconfirmedTest,
    ::testing::Values(
        // Old ranks 0, 2 and 4 hold the first group's state: old rank 1's
        // shard from old rank 2's replica, old rank 3's from old rank 4's.
        Unconfirmed{
            "OneNeverMovedItTheFirstGroupsStateIsTaken", "BUUU", 1, {0, 0, 0}},
        Unconfirmed{
            "EveryoneMovedItTheSecondGroupsStateIsTaken", "UUUU", 1, {1, 1, 1}},
        Unconfirmed{
            "SomeConfirmedItTheSecondGroupsStateIsTaken", "CUUU", 2, {0, 1, 1}},
        Unconfirmed{"EveryoneConfirmedIt", "CCCC", 0, {0, 0, 0}}),
    [](const ::testing::TestParamInfo<Unconfirmed>& info) {
      return info.param.name;
    });

// States of two groups with none every carrier holds (a daemon that
// confirmed beside one that never moved: the confirmation rules it out)
// are named, not mixed.
TEST(ChooseAndPlan, StatesOfTwoGroupsWithNoneInCommonAreRefused) {
  CarryAccount confirmed;
  confirmed.run_id = 7;
  confirmed.old_rank = 0;
  confirmed.old_size = 4;
  confirmed.elements = 100;
  confirmed.local_workers = 1;
  confirmed.state_id = 99;
  CarryAccount never = confirmed;
  never.old_size = 5;
  never.old_rank = 1;
  never.state_id = 0;
  CarryAccount none = AccountOf(nullptr, 7, -1, 0, 1);
  EXPECT_THAT(ChooseAndPlan(7, {{confirmed, none}, {never, none}}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the survivors disagree on run 7")));
}

}  // namespace
}  // namespace node
}  // namespace starling
