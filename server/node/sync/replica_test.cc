// The buddy replica of the synchronous step (sync_run.h ShardReplica): over
// a loopback group of N daemons' data paths, every rank's buddy holds a
// replica of the rank's master shard and optimizer state that is bit for bit
// the owner's after every step, whatever the group size, buddy distance,
// optimizer and wire type; a replica that diverges is caught.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/common.pb.h"
#include "server/base/status_matchers.h"
#include "server/collective/collective_test_util.h"
#include "server/collective/communicator.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/run/run_factory.h"
#include "server/node/sync/step_data_path.h"
#include "server/node/sync/sync_run.h"
#include "server/node/sync/sync_test_util.h"
#include "server/node/telemetry/node_metrics.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;

struct Case {
  int ranks;
  int distance;
  std::string optimizer;
  proto::DataType dtype;
};

std::vector<proto::TensorSpec> Tensors(proto::DataType dtype) {
  return ThreeTensors(dtype, {1000, 37, 5003});
}

// What rank `rank`'s reduce-scatter leaves for element j of its master
// gradients in step `step`: differs per rank, step and element.
float Gradient(int rank, int64_t step, size_t j) {
  return std::sin(0.001f * static_cast<float>(j) + 0.7f * rank +
                  0.13f * static_cast<float>(step));
}

struct RankResult {
  std::vector<float> master;
  std::vector<float> state;
  std::vector<float> replica_master;
  std::vector<float> replica_state;
  int replica_of = -1;
  int64_t replica_version = 0;
  bool exact = false;
  double mismatches = 0;
  double replicated_bytes = 0;
};

// Runs `steps` steps on every rank; `tamper` (if set) runs on rank 0 after
// step 1's replica update.
std::vector<RankResult> RunSteps(
    const Case& c, int steps, void (*tamper)(SyncRun&) = nullptr,
    std::vector<absl::Status>* replica_errors = nullptr) {
  std::vector<RankResult> results(c.ranks);
  std::vector<absl::Status> errors(c.ranks);
  std::vector<absl::Status> statuses = collective::RunOnLoopback(
      c.ranks, collective::CommunicatorOptions(),
      [&](int rank, collective::Communicator* comm) -> absl::Status {
        metrics::MetricsRegistry registry;
        absl::StatusOr<NodeMetrics> metrics = NodeMetrics::Register(&registry);
        if (!metrics.ok()) return metrics.status();
        RunFactoryOptions options;
        options.run_id = 1;
        options.total_workers = 2 * c.ranks;
        options.ranks = c.ranks;
        options.rank = rank;
        options.optimizer = c.optimizer;
        options.learning_rate = 0.05f;
        options.buddy_distance = c.distance;
        absl::StatusOr<std::shared_ptr<SyncRun>> created =
            StartRunAtVersion0(Tensors(c.dtype), options);
        if (!created.ok()) return created.status();
        SyncRun& run = **created;
        if (run.replica == nullptr) return absl::InternalError("no replica");
        StepDataPath path(comm, &*metrics);
        for (int64_t step = 0; step < steps; ++step) {
          for (size_t j = 0; j < run.master.size(); ++j) {
            run.master_gradients[j] = Gradient(rank, step, j);
          }
          absl::Status s =
              path.UpdateAndGather(run, step, collective::CallOptions());
          if (!s.ok()) return s;
          s = path.HandToBuddy(run, step, collective::CallOptions());
          if (!s.ok()) return s;
          s = path.UpdateReplica(run, step);
          if (!s.ok() && errors[rank].ok()) errors[rank] = s;
          if (step == 1 && rank == 0 && tamper != nullptr) tamper(run);
        }
        RankResult& r = results[rank];
        r.master = run.master;
        const absl::Span<const float> state = run.optimizer->state();
        r.state.assign(state.begin(), state.end());
        r.replica_master = run.replica->master;
        const absl::Span<const float> replica_state =
            run.replica->optimizer->state();
        r.replica_state.assign(replica_state.begin(), replica_state.end());
        r.replica_of = run.replica->of_rank;
        r.replica_version = run.replica->version;
        r.exact = run.replica->exact;
        r.mismatches = metrics->replica_mismatches->value();
        r.replicated_bytes = metrics->replicated_bytes->value();
        return absl::OkStatus();
      });
  EXPECT_OK(collective::FirstError(statuses));
  if (replica_errors != nullptr) *replica_errors = errors;
  return results;
}

class ReplicaTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReplicaTest, TheBuddyHoldsTheOwnersShardAndStateBitForBit) {
  const Case& c = GetParam();
  const int steps = 5;
  std::vector<absl::Status> errors;
  const std::vector<RankResult> results = RunSteps(c, steps, nullptr, &errors);
  ASSERT_EQ(results.size(), static_cast<size_t>(c.ranks));
  for (int owner = 0; owner < c.ranks; ++owner) {
    const int buddy = (owner + c.distance) % c.ranks;
    const RankResult& o = results[owner];
    const RankResult& b = results[buddy];
    SCOPED_TRACE(absl::StrCat("owner ", owner, ", buddy ", buddy));
    EXPECT_OK(errors[buddy]);
    EXPECT_EQ(b.replica_of, owner);
    EXPECT_EQ(b.replica_version, steps);
    EXPECT_TRUE(b.exact);
    EXPECT_EQ(b.mismatches, 0);
    ASSERT_EQ(b.replica_master.size(), o.master.size());
    EXPECT_EQ(std::memcmp(b.replica_master.data(), o.master.data(),
                          o.master.size() * sizeof(float)),
              0);
    ASSERT_EQ(b.replica_state.size(), o.state.size());
    EXPECT_EQ(std::memcmp(b.replica_state.data(), o.state.data(),
                          o.state.size() * sizeof(float)),
              0);
    // The steps moved the shard (the comparison is not of initial values).
    EXPECT_GT(o.replicated_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    GroupsAndOptimizers, ReplicaTest,
    ::testing::Values(Case{2, 1, "momentum", proto::DATA_TYPE_FLOAT32},
                      Case{3, 1, "adam", proto::DATA_TYPE_FLOAT32},
                      Case{4, 2, "adam", proto::DATA_TYPE_FLOAT32},
                      Case{5, 3, "sgd", proto::DATA_TYPE_BFLOAT16},
                      Case{3, 2, "momentum", proto::DATA_TYPE_FLOAT16},
                      Case{4, 1, "adam", proto::DATA_TYPE_BFLOAT16}));

TEST(Replica, ADivergedReplicaIsCaughtAndCounted) {
  const Case c{3, 1, "momentum", proto::DATA_TYPE_FLOAT32};
  std::vector<absl::Status> errors;
  const std::vector<RankResult> results = RunSteps(
      c, 4, [](SyncRun& run) { run.replica->master[7] += 1.0f; }, &errors);
  // Rank 0 keeps rank 2's replica; the tampered element is found at the
  // next version, once, and counted every version after.
  EXPECT_THAT(errors[0], StatusIs(absl::StatusCode::kDataLoss,
                                  HasSubstr("the replica of rank 2's shard "
                                            "diverged at version 3")));
  EXPECT_FALSE(results[0].exact);
  EXPECT_EQ(results[0].mismatches, 2);
  EXPECT_OK(errors[1]);
  EXPECT_TRUE(results[1].exact);
}

TEST(Replica, ABuddyDistanceOutsideTheGroupIsRefused) {
  RunFactoryOptions options;
  options.run_id = 1;
  options.total_workers = 1;
  options.ranks = 3;
  options.rank = 0;
  options.buddy_distance = 3;
  EXPECT_THAT(
      CreateSyncRun(Tensors(proto::DATA_TYPE_FLOAT32), options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("buddy distance 3 is not in [0, 3)")));
  options.buddy_distance = 0;
  ASSERT_OK_AND_ASSIGN(
      std::shared_ptr<SyncRun> run,
      CreateSyncRun(Tensors(proto::DATA_TYPE_FLOAT32), options));
  EXPECT_EQ(run->replica, nullptr);
}

TEST(Replica, EveryRunButOptimizerNonesKeepsOne) {
  // Even plain SGD on float32, whose all-gathered parameters are every
  // master shard: a daemon lost mid-all-gather leaves them mixed, so the
  // run's continuation takes the lost shard from its buddy. A shard that
  // never changes (optimizer "none") needs none.
  RunFactoryOptions options;
  options.run_id = 1;
  options.total_workers = 1;
  options.ranks = 3;
  options.rank = 1;
  options.buddy_distance = 1;
  options.optimizer = "sgd";
  ASSERT_OK_AND_ASSIGN(
      std::shared_ptr<SyncRun> run,
      CreateSyncRun(Tensors(proto::DATA_TYPE_FLOAT32), options));
  ASSERT_NE(run->replica, nullptr);
  EXPECT_EQ(run->replica->of_rank, 0);
  EXPECT_EQ(run->undo_master.size(), run->master.size());
  options.optimizer = "none";
  ASSERT_OK_AND_ASSIGN(
      run, CreateSyncRun(Tensors(proto::DATA_TYPE_FLOAT32), options));
  EXPECT_EQ(run->replica, nullptr);
}

}  // namespace
}  // namespace node
}  // namespace starling
