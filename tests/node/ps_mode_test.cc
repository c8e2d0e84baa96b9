// Parameter-server async mode.
//
// AsyncPushesConvergeToTheOptimum: 4 daemons x 2 workers; each push goes
// to the shard owners, which apply it at once (gradient scale 1/8, so 8
// pushes make one SGD step of the mean gradient) with no synchronisation
// between workers. Every worker minimises the same quadratic
// (--homogeneous), so whatever order the pushes land in, the shards
// converge to its optimum b_i: after 200 steps per worker (1600 updates of
// every shard) the parameters every worker pulls after the final barrier
// must be within 1e-3 of b_i in every element. Every daemon must have
// applied all 1600 pushes to its shard.
//
// MultiMegabyteShardsPushAndPullExactly: shards far larger than a control
// message (1 MiB). 2 daemons x 2 workers (threads of this test, through
// //client) train kBigDim floats, so each daemon owns about 6 MB. Step t:
// every worker pulls (after a barrier, so every push of step t - 1 was
// applied) and checks the parameters bit for bit against the fp64
// reference, pushes g = x + c_w,t (four pushes in flight to both owners at
// once) and enters the barrier. With learning rate 0.5 and gradient scale
// 1/4 (four workers),
//   x_t+1 = x_t - (1/8) sum_w (x_t + c_w,t) = x_t / 2 - (1/8) sum_w c_w,t,
// where c_w,t,i is an integer in [-8, 8] that differs by worker, step and
// element. Every value is then a binary fraction of a few bits, exact in
// float32 whatever order the owners apply the pushes in, so a lost,
// doubled, misplaced or mixed-up element shows as a difference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/test_params.h"
#include "worker/examples/quadratic.h"

namespace starling {
namespace testing_node {
namespace {

constexpr int kDim = 1000;
constexpr int kSteps = 200;
constexpr double kTolerance = 1e-3;

TEST(ParameterServer, AsyncPushesConvergeToTheOptimum) {
  ClusterOptions options;
  options.daemons = 4;
  options.local_workers = 2;
  options.parameter_count = kDim;
  options.mode = "parameter_server";
  options.learning_rate = 0.1;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<pid_t> workers = cluster.StartAllWorkers(
      {"--steps=200", "--homogeneous", "--check_allreduce", "--timeout=40s"});
  for (pid_t pid : workers) {
    ProcessResult result = cluster.Wait(pid, absl::Seconds(55));
    ASSERT_FALSE(result.timed_out) << result.err << cluster.ServerLogs();
    ASSERT_EQ(result.exit_code, 0) << result.err << cluster.ServerLogs();
    EXPECT_NE(result.out.find("allreduce=ok"), std::string::npos);
    const std::vector<float> x = ParamsOf(result.out);
    ASSERT_EQ(x.size(), static_cast<size_t>(kDim));
    double worst = 0;
    for (int i = 0; i < kDim; ++i) {
      worst = std::max<double>(worst, std::abs(x[i] - examples::QuadraticB(i)));
    }
    EXPECT_LT(worst, kTolerance);
  }
  for (int d = 0; d < options.daemons; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    ASSERT_TRUE(cluster.NodeStatus(d, &status, &error))
        << error << cluster.ServerLogs();
    // The run is over: its record keeps the updates of this shard.
    ASSERT_GT(status.recent_runs_size(), 0) << "daemon " << d;
    EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
    EXPECT_EQ(status.recent_runs(0).steps(), 8 * kSteps) << "daemon " << d;
  }
  cluster.ExpectPeerTransports(options.daemons);
}

// 3,000,017 floats (odd, so the two shards differ in size): 6 MB per owner.
constexpr int64_t kBigDim = 3'000'017;
constexpr int kBigDaemons = 2;
constexpr int kBigLocalWorkers = 2;
constexpr int kBigWorkers = kBigDaemons * kBigLocalWorkers;
constexpr int kBigSteps = 6;
constexpr double kBigLearningRate = 0.5;
static_assert((kBigWorkers & (kBigWorkers - 1)) == 0,
              "the gradient scale 1 / workers must be exact");

// Worker `worker`'s gradient offset at step `step`, element `i`.
double Offset(int worker, int step, int64_t i) {
  return static_cast<double>((i * 7 + worker * 13 + step * 5) % 17) - 8.0;
}

struct WorkerResult {
  absl::Status status;
  absl::Duration push_time;
  absl::Duration pull_time;
};

// One worker of the big-tensor job, per step: pulls, checks, barrier,
// pushes, barrier; then a last pull and check, and Finish.
WorkerResult RunBigWorker(const std::string& socket, int daemon, int index) {
  WorkerResult result;
  client::ClientOptions options;
  options.socket_path = socket;
  options.worker_index = index;
  options.timeout = absl::Seconds(60);
  options.pool_bytes = 2 * (kBigDim + 1024) * sizeof(float);
  absl::StatusOr<std::unique_ptr<client::Client>> connected =
      client::Client::Connect(options);
  if (!connected.ok()) {
    result.status = connected.status();
    return result;
  }
  client::Client& c = **connected;
  const int me = daemon * kBigLocalWorkers + index;
  absl::Status status =
      c.DeclareTensor("x", {kBigDim}, client::DataType::kFloat32);
  absl::StatusOr<absl::Span<float>> x = c.AllocateTensor("x");
  absl::StatusOr<absl::Span<float>> g = c.AllocateTensor("x");
  if (status.ok() && !x.ok()) status = x.status();
  if (status.ok() && !g.ok()) status = g.status();
  // The parameters pulled at the step before (checked against the
  // reference then), from which this step's reference follows.
  std::vector<float> previous(kBigDim, 0.0f);
  for (int step = 0; status.ok() && step <= kBigSteps; ++step) {
    const absl::Time pull_start = absl::Now();
    status = c.PullParameters(step, {{"x", *x}});
    result.pull_time += absl::Now() - pull_start;
    if (!status.ok()) break;
    int64_t wrong = 0;
    int64_t first_wrong = -1;
    double first_want = 0;
    for (int64_t i = 0; i < kBigDim; ++i) {
      double want = 0;
      if (step > 0) {
        double offsets = 0;
        for (int w = 0; w < kBigWorkers; ++w) offsets += Offset(w, step - 1, i);
        want = previous[i] * (1 - kBigLearningRate) -
               offsets * kBigLearningRate / kBigWorkers;
      }
      if (static_cast<double>((*x)[i]) != want) {
        if (wrong++ == 0) {
          first_wrong = i;
          first_want = want;
        }
      }
      previous[i] = (*x)[i];
    }
    if (wrong > 0) {
      status = absl::InternalError(absl::StrCat(
          "worker ", me, " pulled after step ", step, ": ", wrong,
          " elements differ from the reference; the first is x[", first_wrong,
          "] = ", (*x)[first_wrong], ", want ", first_want));
      break;
    }
    if (step == kBigSteps) break;
    // Every worker has pulled step `step` before anyone pushes to it: a
    // push is applied at once, so a pull after it would see it.
    status = c.Barrier();
    if (!status.ok()) break;
    for (int64_t i = 0; i < kBigDim; ++i) {
      (*g)[i] = (*x)[i] + static_cast<float>(Offset(me, step, i));
    }
    const absl::Time push_start = absl::Now();
    status = c.PushGradients(step, {{"x", *g}});
    result.push_time += absl::Now() - push_start;
    if (status.ok()) status = c.Barrier();
  }
  if (status.ok()) status = c.Finish();
  result.status = status;
  return result;
}

TEST(ParameterServer, MultiMegabyteShardsPushAndPullExactly) {
  ClusterOptions options;
  options.daemons = kBigDaemons;
  options.local_workers = kBigLocalWorkers;
  options.parameter_count = kBigDim;
  options.mode = "parameter_server";
  options.learning_rate = kBigLearningRate;
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<WorkerResult> results(kBigWorkers);
  std::vector<std::thread> threads;
  for (int d = 0; d < kBigDaemons; ++d) {
    for (int w = 0; w < kBigLocalWorkers; ++w) {
      threads.emplace_back([&cluster, &results, d, w] {
        results[d * kBigLocalWorkers + w] =
            RunBigWorker(cluster.socket_path(d), d, w);
      });
    }
  }
  for (std::thread& t : threads) t.join();
  absl::Duration push_time, pull_time;
  for (int w = 0; w < kBigWorkers; ++w) {
    ASSERT_TRUE(results[w].status.ok())
        << "worker " << w << ": " << results[w].status << cluster.ServerLogs();
    push_time += results[w].push_time;
    pull_time += results[w].pull_time;
  }
  // For the record, not checked: the mean time of one worker's push or
  // pull of the whole tensor (half of it to the other daemon).
  const double mbytes = kBigDim * sizeof(float) / 1e6;
  std::printf(
      "%.1f MB tensor, %d workers: push %.1f ms, pull %.1f ms (mean)\n", mbytes,
      kBigWorkers,
      absl::ToDoubleMilliseconds(push_time / (kBigWorkers * kBigSteps)),
      absl::ToDoubleMilliseconds(pull_time / (kBigWorkers * (kBigSteps + 1))));
  for (int d = 0; d < kBigDaemons; ++d) {
    proto::NodeStatusReply status;
    std::string error;
    ASSERT_TRUE(cluster.NodeStatus(d, &status, &error))
        << error << cluster.ServerLogs();
    ASSERT_GT(status.recent_runs_size(), 0) << "daemon " << d;
    EXPECT_EQ(status.recent_runs(0).state(), proto::RunStatus::STATE_FINISHED);
    EXPECT_EQ(status.recent_runs(0).steps(), kBigWorkers * kBigSteps)
        << "daemon " << d;
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
