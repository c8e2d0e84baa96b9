// The EASGD modes end to end: a coordinator, node daemons holding the
// centre variable, and starling-worker processes keeping their own
// parameters, training the MLP on a Fashion-MNIST subset (CI-fast; the
// numbers below were measured on it).
//
//   - Sync EASGD is deterministic: two runs end with bit-identical centres,
//     equal bit for bit to a single-process implementation of the same
//     equations (below: W local models, the elastic sum in the daemons'
//     order), with 2 daemons x 1 worker and tau 4;
//   - each asynchronous variant (async_easgd, async_measgd, hogwild_easgd,
//     round_robin_easgd) learns: accuracy above kMinAsyncAccuracy after 2
//     epochs of 4096 samples, and every worker ends with the same centre;
//   - round_robin_easgd serves one worker at a time: a worker that never
//     takes its turn makes the next one fail with an error naming it;
//   - bad settings fail at the coordinator with the flag to change.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "tests/node/reference_mlp.h"
#include "worker/train/dataset.h"
#include "worker/train/idx.h"
#include "worker/train/model.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;

// Accuracy after 2 epochs of 4096 samples (batch 32) on the first 1000
// test samples, in percent. Sync SGD reaches 80.9 on the same data.
constexpr double kMinSyncAccuracy = 77.0;
constexpr double kMinAsyncAccuracy = 70.0;
constexpr absl::Duration kWorkerBound = absl::Seconds(120);
constexpr int kBatch = 32;
constexpr int64_t kTrainLimit = 4096;
constexpr int64_t kTestLimit = 1000;
constexpr int kEpochs = 2;
constexpr uint64_t kSeed = 1;
constexpr double kLearningRate = 0.1;
constexpr double kBeta = 0.9;

struct Job {
  int daemons = 2;
  int local_workers = 1;
  std::string mode = "sync_easgd";
  int tau = 4;
  double learning_rate = kLearningRate;
  absl::Duration collective_timeout = absl::Seconds(30);
};

struct WorkerRun {
  ProcessResult result;
  std::vector<float> params;  // --out: the centre
  double accuracy = -1;
};

ClusterOptions OptionsFor(const Job& job) {
  ClusterOptions options;
  options.daemons = job.daemons;
  options.local_workers = job.local_workers;
  options.mode = job.mode;
  options.optimizer = "easgd";
  options.learning_rate = job.learning_rate;
  options.collective_timeout = job.collective_timeout;
  options.fix_parameter_count = false;
  return options;
}

std::vector<std::string> WorkerFlags(const NodeCluster& cluster, int d,
                                     const std::string& out, int index = 0) {
  return {absl::StrCat("--socket=", cluster.socket_path(d)),
          absl::StrCat("--worker_index=", index),
          absl::StrCat("--batch_size=", kBatch),
          absl::StrCat("--train_limit=", kTrainLimit),
          absl::StrCat("--test_limit=", kTestLimit),
          absl::StrCat("--seed=", kSeed),
          absl::StrCat("--out=", out),
          "--progress_interval=1s",
          "--timeout=60s"};
}

void StartJob(NodeCluster& cluster, const Job& job) {
  const int64_t partitions = (kTrainLimit + kBatch - 1) / kBatch;
  cluster.StartCoordinatorWith(
      "coordinator", {absl::StrCat("--epochs=", kEpochs),
                      absl::StrCat("--partitions_per_epoch=", partitions),
                      absl::StrCat("--elastic_tau=", job.tau),
                      absl::StrCat("--elastic_beta=", kBeta)});
  cluster.StartDaemons();
}

std::vector<WorkerRun> RunJob(const Job& job, const std::string& tag) {
  NodeCluster cluster(OptionsFor(job));
  StartJob(cluster, job);
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int d = 0; d < job.daemons; ++d) {
    for (int i = 0; i < job.local_workers; ++i) {
      outs.push_back(TempPath(absl::StrCat(tag, "_centre", d, "_", i, ".bin")));
      pids.push_back(cluster.Spawn(absl::StrCat(tag, "_worker", d, "_", i),
                                   BinaryPath("worker/trainer/starling-worker"),
                                   WorkerFlags(cluster, d, outs.back(), i)));
    }
  }
  std::vector<WorkerRun> runs;
  for (size_t w = 0; w < pids.size(); ++w) {
    WorkerRun run;
    run.result = cluster.Wait(pids[w], kWorkerBound);
    run.params = ReadFloats(outs[w]);
    run.accuracy = FinalAccuracy(run.result.out);
    EXPECT_FALSE(run.result.timed_out)
        << tag << " worker " << w << " hung\n"
        << run.result.out << run.result.err << cluster.ServerLogs();
    EXPECT_EQ(run.result.exit_code, 0)
        << tag << " worker " << w << ":\n"
        << run.result.out << run.result.err << cluster.ServerLogs();
    runs.push_back(std::move(run));
  }
  cluster.ExpectPeerTransports(job.daemons);
  return runs;
}

// Sync EASGD in one process, from the equations (Zhang, Choromanska &
// LeCun 2015) and the worker's data rules (dataset.h; the coordinator
// gives worker w partition i * W + w of iteration i): W models x_w from
// the same initial parameters; each takes x_w -= lr * g on its batch;
// after every tau steps d_w = alpha (x_w - c), x_w -= d_w, c += sum_w d_w,
// alpha = beta / W. The sum is in worker order (what the daemons compute
// with one worker each for W = 2).
std::vector<float> ReferenceSyncEasgd(int workers, int tau) {
  std::unique_ptr<ReferenceMlp> reference =
      MakeReferenceMlp(kTrainLimit, kBatch);
  if (reference == nullptr) return {};
  train::Dataset* data = &reference->data;
  train::Model& m = *reference->model;
  const size_t p = m.parameter_count();
  std::vector<float> center(p);
  m.InitParameters(kSeed, absl::MakeSpan(center));
  std::vector<std::vector<float>> x(workers, center);
  const float lr = static_cast<float>(kLearningRate);
  const float alpha = static_cast<float>(kBeta) / static_cast<float>(workers);
  const int64_t n = data->size();
  const int64_t partitions = train::NumPartitions(n, kBatch);
  const int64_t iterations = (partitions + workers - 1) / workers;
  std::vector<float> images(static_cast<size_t>(kBatch) *
                            train::kImageElements);
  std::vector<uint8_t> labels(kBatch);
  std::vector<float> sum(p), d(p);
  for (int64_t t = 0; t < kEpochs * iterations; ++t) {
    const int64_t epoch = t / iterations;
    const std::vector<int64_t> order = train::EpochOrder(kSeed, epoch, n);
    for (int w = 0; w < workers; ++w) {
      const int64_t part = (t % iterations) * workers + w;
      if (part >= partitions) continue;
      const absl::Span<const int64_t> samples =
          train::PartitionSamples(order, part, kBatch);
      const std::vector<int64_t> batch(samples.begin(), samples.end());
      data->Gather(batch, images.data(), labels.data());
      EXPECT_TRUE(m.SetParameters(x[w]).ok());
      EXPECT_TRUE(
          m.Forward(images.data(), static_cast<int>(batch.size())).ok());
      EXPECT_TRUE(m.Loss(labels.data()).ok());
      EXPECT_TRUE(m.Backward(labels.data(), nullptr).ok());
      const absl::Span<const float> g = m.gradients();
      for (size_t i = 0; i < p; ++i) x[w][i] -= lr * g[i];
    }
    if ((t + 1) % tau != 0) continue;
    for (int w = 0; w < workers; ++w) {
      for (size_t i = 0; i < p; ++i) {
        d[i] = alpha * (x[w][i] - center[i]);
        x[w][i] -= d[i];
        sum[i] = w == 0 ? d[i] : sum[i] + d[i];
      }
    }
    for (size_t i = 0; i < p; ++i) center[i] += sum[i];
  }
  return center;
}

TEST(Easgd, SyncIsDeterministicAndEqualsTheEquations) {
  Job job;
  const std::vector<WorkerRun> a = RunJob(job, "sync_a");
  const std::vector<WorkerRun> b = RunJob(job, "sync_b");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  const std::vector<float> reference = ReferenceSyncEasgd(2, job.tau);
  ASSERT_FALSE(a[0].params.empty());
  for (size_t w = 0; w < a.size(); ++w) {
    EXPECT_TRUE(a[w].params == a[0].params)
        << "worker " << w << "'s centre differs from worker 0's by "
        << MaxAbsDiff(a[w].params, a[0].params);
    EXPECT_TRUE(b[w].params == a[0].params)
        << "run 2 worker " << w << " differs from run 1 by "
        << MaxAbsDiff(b[w].params, a[0].params);
  }
  EXPECT_TRUE(reference == a[0].params)
      << "the single-process equations differ from the daemons' centre by "
      << MaxAbsDiff(reference, a[0].params);
  std::printf("sync_easgd tau %d: accuracy %.2f%% and %.2f%%\n", job.tau,
              a[0].accuracy, b[0].accuracy);
  EXPECT_GT(a[0].accuracy, kMinSyncAccuracy);
  EXPECT_THAT(a[0].result.out, HasSubstr("elastic averaging: tau 4, alpha "
                                         "0.45 (beta / 2 workers)"));
}

TEST(Easgd, EveryAsynchronousVariantLearns) {
  for (const std::string mode :
       {"async_easgd", "async_measgd", "hogwild_easgd", "round_robin_easgd"}) {
    Job job;
    job.mode = mode;
    // Nesterov momentum 0.99 multiplies the step by about 1 / (1 - 0.99).
    if (mode == "async_measgd") job.learning_rate = kLearningRate / 100;
    const std::vector<WorkerRun> runs = RunJob(job, mode);
    ASSERT_EQ(runs.size(), 2u);
    for (size_t w = 0; w < runs.size(); ++w) {
      std::printf("%s worker %zu: accuracy %.2f%%\n", mode.c_str(), w,
                  runs[w].accuracy);
      EXPECT_GT(runs[w].accuracy, kMinAsyncAccuracy) << mode << " worker " << w;
      EXPECT_THAT(runs[w].result.out, HasSubstr(absl::StrCat("mode ", mode)));
      // After the barrier every push was applied: one centre.
      EXPECT_TRUE(runs[w].params == runs[0].params)
          << mode << ": worker " << w << "'s centre differs by "
          << MaxAbsDiff(runs[w].params, runs[0].params);
    }
  }
}

// Three daemons (not a power of two) with two workers each, and a tau that
// divides neither the 22 iterations of an epoch nor the run: six workers,
// of which only two have data in each epoch's last iteration.
TEST(Easgd, SixWorkersOnThreeDaemons) {
  for (const std::string mode :
       {"sync_easgd", "hogwild_easgd", "round_robin_easgd"}) {
    Job job;
    job.daemons = 3;
    job.local_workers = 2;
    job.mode = mode;
    job.tau = 3;
    const std::vector<WorkerRun> runs = RunJob(job, mode + "_3x2");
    ASSERT_EQ(runs.size(), 6u);
    std::printf("%s, 3 daemons x 2 workers, tau 3: accuracy %.2f%%\n",
                mode.c_str(), runs[0].accuracy);
    EXPECT_GT(runs[0].accuracy, kMinAsyncAccuracy) << mode;
    EXPECT_THAT(runs[0].result.out,
                HasSubstr("tau 3, alpha 0.15 (beta / 6 workers)"));
    for (size_t w = 0; w < runs.size(); ++w) {
      EXPECT_TRUE(runs[w].params == runs[0].params)
          << mode << ": worker " << w << "'s centre differs by "
          << MaxAbsDiff(runs[w].params, runs[0].params);
    }
  }
}

TEST(Easgd, RoundRobinNamesTheWorkerWhoseTurnItIs) {
  Job job;
  job.mode = "round_robin_easgd";
  job.collective_timeout = absl::Seconds(3);
  NodeCluster cluster(OptionsFor(job));
  StartJob(cluster, job);
  // Worker 0 makes exchanges 0 and 1 (after steps 3 and 7), then dies;
  // worker 1's exchange 2 comes after worker 0's, which never comes.
  std::vector<std::string> flags0 =
      WorkerFlags(cluster, 0, TempPath("rr_centre0.bin"));
  flags0.push_back("--exit_after_step=7");
  const pid_t w0 = cluster.Spawn(
      "rr_worker0", BinaryPath("worker/trainer/starling-worker"), flags0);
  const pid_t w1 =
      cluster.Spawn("rr_worker1", BinaryPath("worker/trainer/starling-worker"),
                    WorkerFlags(cluster, 1, TempPath("rr_centre1.bin")));
  const ProcessResult r0 = cluster.Wait(w0, kWorkerBound);
  EXPECT_THAT(r0.out, HasSubstr("--exit_after_step=7: killing myself"));
  const ProcessResult r1 = cluster.Wait(w1, kWorkerBound);
  EXPECT_FALSE(r1.timed_out) << r1.out << r1.err;
  EXPECT_NE(r1.exit_code, 0) << r1.out;
  std::printf("worker 1's error: %s", r1.err.c_str());
  EXPECT_THAT(r1.err,
              HasSubstr("elastic exchange 2 (after step 11, round_robin_easgd)"
                        ": pulling the centre"));
  EXPECT_THAT(r1.err, HasSubstr("round-robin EASGD: exchange 5 waits for "
                                "worker number 0 (of 2"));
  EXPECT_THAT(r1.err, HasSubstr("has applied 4 pushes, none within 3s"));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
