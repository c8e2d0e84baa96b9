// The training side of the client API against real daemons on loopback,
// with in-process clients (one std::thread per worker):
//   - initial parameters from one worker (not index 0) reach every worker,
//     and the first update is exact against an fp64 reference;
//   - a worker that takes a departed worker's place pulls the current
//     parameters, equal to what the others hold;
//   - gradient buckets pushed tensor by tensor (backward order) end
//     bit-identical to one push of everything;
//   - part-push and initial-parameter errors;
//   - 16-bit tensors keep a float32 master (updates below half an ulp of
//     the 16-bit value are not lost), and a mixed float32/float16 run;
//   - async SGD's staleness bound is enforced by the daemons;
//   - the coordinator's data schedule reaches the workers.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// Returns `expr`'s status from the enclosing function unless it is OK.
#define TRAINING_TEST_RETURN_IF_ERROR(expr) \
  do {                                      \
    const absl::Status status_ = (expr);    \
    if (!status_.ok()) return status_;      \
  } while (false)

// A status naming where a worker's check failed.
absl::Status Mismatch(const std::string& what) {
  return absl::InternalError(what);
}

absl::StatusOr<std::unique_ptr<client::Client>> ConnectWorker(
    const NodeCluster& cluster, int daemon, int index,
    size_t bucket_bytes = client::ClientOptions::kDefaultBucketBytes) {
  client::ClientOptions options;
  options.socket_path = cluster.socket_path(daemon);
  options.worker_index = index;
  options.worker_name = absl::StrCat("worker ", daemon, ".", index);
  options.timeout = absl::Seconds(30);
  options.pool_bytes = size_t{4} << 20;
  options.bucket_bytes = bucket_bytes;
  return client::Client::Connect(options);
}

// Runs `body(daemon, index)` for every worker, one thread each; returns
// their statuses in rank-major order.
std::vector<absl::Status> RunWorkers(
    int daemons, int local_workers,
    const std::function<absl::Status(int, int)>& body) {
  std::vector<absl::Status> results(daemons * local_workers);
  std::vector<std::thread> threads;
  for (int d = 0; d < daemons; ++d) {
    for (int i = 0; i < local_workers; ++i) {
      threads.emplace_back([&results, &body, d, i, local_workers] {
        results[d * local_workers + i] = body(d, i);
      });
    }
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void ExpectAllOk(const std::vector<absl::Status>& results,
                 const NodeCluster& cluster) {
  for (size_t w = 0; w < results.size(); ++w) {
    EXPECT_TRUE(results[w].ok()) << "worker " << w << ": " << results[w] << "\n"
                                 << cluster.ServerLogs();
  }
}

// The first element of `got` that differs (bitwise) from `want`, as a
// status naming it.
absl::Status CompareBits(const std::string& what, absl::Span<const float> got,
                         absl::Span<const float> want) {
  if (got.size() != want.size()) {
    return Mismatch(
        absl::StrCat(what, ": ", got.size(), " elements, want ", want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return Mismatch(
          absl::StrCat(what, "[", i, "] = ", got[i], ", want ", want[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CompareBits16(const std::string& what,
                           absl::Span<const uint16_t> got,
                           absl::Span<const uint16_t> want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] != want[i]) {
      return Mismatch(absl::StrCat(what, "[", i, "] = 0x", absl::Hex(got[i]),
                                   ", want 0x", absl::Hex(want[i])));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// 1. Initial parameters from one worker reach every worker.

constexpr int kInitW = 6;  // "w" {3, 2}
constexpr int kInitB = 5;  // "b" {5}

// `daemons` daemons of `local_workers` workers each, learning rate `lr`;
// the tensors are whatever the workers declare.
ClusterOptions ApiOptions(int daemons, int local_workers, double lr = 0.1) {
  ClusterOptions options;
  options.daemons = daemons;
  options.local_workers = local_workers;
  options.learning_rate = lr;
  options.fix_parameter_count = false;
  return options;
}

// Dyadic values with few significant bits: every sum, mean and product
// below is exact in float32, so the daemon's float32 arithmetic must give
// the fp64 reference exactly (whatever the order of the additions).
double InitW(int i) { return (i % 2 == 0 ? 1.0 : -1.0) * 0.75 * (i + 1); }
double InitB(int i) { return 2.25 - 0.5 * i; }
double Grad(int worker, int tensor, int i) {
  return (worker + 1) * 0.125 * (i + 1) - 0.5 * worker + 0.25 * tensor;
}

TEST(TrainingApi, InitialParametersFromOneWorkerReachEveryWorker) {
  ClusterOptions options = ApiOptions(2, 2, 0.5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const int workers = options.daemons * options.local_workers;
  const double lr = 0.5;

  // The fp64 references: version 0 and version 1.
  std::vector<float> w0(kInitW), b0(kInitB), w1(kInitW), b1(kInitB);
  for (int i = 0; i < kInitW; ++i) {
    double sum = 0;
    for (int k = 0; k < workers; ++k) sum += Grad(k, 0, i);
    w0[i] = static_cast<float>(InitW(i));
    w1[i] = static_cast<float>(InitW(i) - lr * (sum / workers));
  }
  for (int i = 0; i < kInitB; ++i) {
    double sum = 0;
    for (int k = 0; k < workers; ++k) sum += Grad(k, 1, i);
    b0[i] = static_cast<float>(InitB(i));
    b1[i] = static_cast<float>(InitB(i) - lr * (sum / workers));
  }
  for (float v : w0) ASSERT_NE(v, 0.0f);
  for (float v : b0) ASSERT_NE(v, 0.0f);

  std::vector<absl::Status> results =
      RunWorkers(options.daemons, options.local_workers, [&](int d, int i) {
        const int me = d * options.local_workers + i;
        absl::StatusOr<std::unique_ptr<client::Client>> c =
            ConnectWorker(cluster, d, i);
        if (!c.ok()) return c.status();
        client::Client& client = **c;
        TRAINING_TEST_RETURN_IF_ERROR(
            client.DeclareTensor("w", {3, 2}, client::DataType::kFloat32));
        TRAINING_TEST_RETURN_IF_ERROR(
            client.DeclareTensor("b", {5}, client::DataType::kFloat32));
        absl::StatusOr<absl::Span<float>> w = client.AllocateTensor("w");
        absl::StatusOr<absl::Span<float>> b = client.AllocateTensor("b");
        absl::StatusOr<absl::Span<float>> gw = client.AllocateTensor("w");
        absl::StatusOr<absl::Span<float>> gb = client.AllocateTensor("b");
        absl::StatusOr<absl::Span<float>> iw = client.AllocateTensor("w");
        absl::StatusOr<absl::Span<float>> ib = client.AllocateTensor("b");
        for (const auto* s : {&w, &b, &gw, &gb, &iw, &ib}) {
          if (!s->ok()) return s->status();
        }
        if (d == 0 && i == 1) {
          // The supplier: rank 0, index 1 (any worker can supply).
          for (int k = 0; k < kInitW; ++k) (*iw)[k] = w0[k];
          for (int k = 0; k < kInitB; ++k) (*ib)[k] = b0[k];
          TRAINING_TEST_RETURN_IF_ERROR(
              client.SetInitialParameters({{"w", *iw}, {"b", *ib}}));
        }
        TRAINING_TEST_RETURN_IF_ERROR(
            client.PullParameters(0, {{"w", *w}, {"b", *b}}));
        TRAINING_TEST_RETURN_IF_ERROR(
            CompareBits(absl::StrCat("worker ", me, " version 0 w"), *w, w0));
        TRAINING_TEST_RETURN_IF_ERROR(
            CompareBits(absl::StrCat("worker ", me, " version 0 b"), *b, b0));
        for (int k = 0; k < kInitW; ++k) {
          (*gw)[k] = static_cast<float>(Grad(me, 0, k));
        }
        for (int k = 0; k < kInitB; ++k) {
          (*gb)[k] = static_cast<float>(Grad(me, 1, k));
        }
        TRAINING_TEST_RETURN_IF_ERROR(
            client.PushGradients(0, {{"w", *gw}, {"b", *gb}}));
        TRAINING_TEST_RETURN_IF_ERROR(
            client.PullParameters(1, {{"w", *w}, {"b", *b}}));
        TRAINING_TEST_RETURN_IF_ERROR(
            CompareBits(absl::StrCat("worker ", me, " version 1 w"), *w, w1));
        TRAINING_TEST_RETURN_IF_ERROR(
            CompareBits(absl::StrCat("worker ", me, " version 1 b"), *b, b1));
        return client.Finish();
      });
  ExpectAllOk(results, cluster);
}

// The rule for several workers with initial parameters: those that set
// them (SetInitialParameters) must set the same, bit for bit, or the run
// does not begin, on one daemon (naming the workers, the tensor and the
// element) or across daemons (naming the ranks); offers
// (OfferInitialParameters) may differ, and the first in (rank, worker)
// order is taken unless some worker set them. The daemons serve on.
TEST(TrainingApi, InitialParametersThatDifferAreRefusedOffersAreNot) {
  ClusterOptions options = ApiOptions(2, 2, 0.5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  constexpr int kDim = 4;
  enum class Give { kNone, kSet, kOffer };
  struct Plan {
    Give give = Give::kNone;
    float value = 0;
  };
  // One run: worker (d, i) gives plans[d][i]; returns each worker's pulled
  // version 0 (or its first error).
  const auto run = [&](const std::vector<std::vector<Plan>>& plans,
                       std::vector<std::vector<float>>* pulled) {
    pulled->assign(4, {});
    return RunWorkers(2, 2, [&](int d, int i) -> absl::Status {
      absl::StatusOr<std::unique_ptr<client::Client>> c =
          ConnectWorker(cluster, d, i);
      if (!c.ok()) return c.status();
      TRAINING_TEST_RETURN_IF_ERROR(
          (*c)->DeclareTensor("x", {kDim}, client::DataType::kFloat32));
      absl::StatusOr<absl::Span<float>> x = (*c)->AllocateTensor("x");
      if (!x.ok()) return x.status();
      const Plan& plan = plans[d][i];
      for (float& v : *x) v = plan.value;
      if (plan.give == Give::kSet) {
        TRAINING_TEST_RETURN_IF_ERROR((*c)->SetInitialParameters({{"x", *x}}));
      } else if (plan.give == Give::kOffer) {
        TRAINING_TEST_RETURN_IF_ERROR(
            (*c)->OfferInitialParameters({{"x", *x}}));
      }
      TRAINING_TEST_RETURN_IF_ERROR((*c)->PullParameters(0, {{"x", *x}}));
      (*pulled)[d * 2 + i].assign(x->begin(), x->end());
      TRAINING_TEST_RETURN_IF_ERROR((*c)->PushGradients(0, {{"x", *x}}));
      return (*c)->Finish();
    });
  };
  std::vector<std::vector<float>> pulled;
  const Plan set1{Give::kSet, 1}, set2{Give::kSet, 2}, none{};
  // Two workers of rank 0 set different values.
  for (const absl::Status& status :
       run({{set1, set2}, {none, none}}, &pulled)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("set different initial parameters: tensor 'x' "
                                "element 0 is 1 from "),
                      HasSubstr("and 2 from")))
        << status;
  }
  // A worker of rank 0 and one of rank 1.
  for (const absl::Status& status :
       run({{set1, none}, {set2, none}}, &pulled)) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("the workers of rank 0 and rank 1 set different "
                          "initial parameters"))
        << status;
  }
  // The same values set twice are one value.
  ExpectAllOk(run({{set2, none}, {none, set2}}, &pulled), cluster);
  for (const auto& x : pulled) EXPECT_THAT(x, ::testing::Each(2.0f));
  // Offers that differ: the first in (rank, worker) order is taken...
  const Plan offer3{Give::kOffer, 3}, offer4{Give::kOffer, 4};
  ExpectAllOk(run({{none, offer3}, {offer4, offer4}}, &pulled), cluster);
  for (const auto& x : pulled) EXPECT_THAT(x, ::testing::Each(3.0f));
  // ...unless a worker set them.
  ExpectAllOk(run({{offer3, offer4}, {none, set1}}, &pulled), cluster);
  for (const auto& x : pulled) EXPECT_THAT(x, ::testing::Each(1.0f));
}

// ---------------------------------------------------------------------------
// 2. A worker that takes a departed worker's place pulls the current
// parameters.

TEST(TrainingApi, ALaterWorkerGetsTheCurrentParameters) {
  ClusterOptions options = ApiOptions(2, 2, 0.5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  constexpr int kSteps = 5;
  constexpr int kLeaveAfter = 2;  // the victim pushed steps 0 and 1
  constexpr int kDim = 40;
  const int victim_daemon = 1, victim_index = 1;

  // What each worker pulled at each version (rank-major), and what the
  // replacement pulled first.
  absl::Mutex mu;
  std::vector<std::vector<std::vector<float>>> pulled(
      options.daemons * options.local_workers,
      std::vector<std::vector<float>>(kSteps + 1));
  int64_t replacement_first_step = -1;
  std::vector<float> replacement_first_pull;

  auto gradient = [](int me, int step, int k) {
    return static_cast<float>(((me * 3 + step * 5 + k * 7) % 11) - 5) * 0.25f;
  };
  // Steps [from, to) of worker `me` with client `c`, recording its pulls.
  auto train = [&](client::Client& c, int me, int from, int to,
                   absl::Span<float> x, absl::Span<float> g) -> absl::Status {
    for (int step = from; step < to; ++step) {
      TRAINING_TEST_RETURN_IF_ERROR(c.PullParameters(step, {{"x", x}}));
      {
        absl::MutexLock lock(&mu);
        pulled[me][step].assign(x.begin(), x.end());
      }
      for (int k = 0; k < kDim; ++k) g[k] = gradient(me, step, k);
      TRAINING_TEST_RETURN_IF_ERROR(c.PushGradients(step, {{"x", g}}));
    }
    TRAINING_TEST_RETURN_IF_ERROR(c.PullParameters(to, {{"x", x}}));
    absl::MutexLock lock(&mu);
    pulled[me][to].assign(x.begin(), x.end());
    return absl::OkStatus();
  };

  std::vector<absl::Status> results =
      RunWorkers(options.daemons, options.local_workers, [&](int d, int i) {
        const int me = d * options.local_workers + i;
        const bool victim = d == victim_daemon && i == victim_index;
        absl::StatusOr<std::unique_ptr<client::Client>> c =
            ConnectWorker(cluster, d, i);
        if (!c.ok()) return c.status();
        TRAINING_TEST_RETURN_IF_ERROR(
            (*c)->DeclareTensor("x", {kDim}, client::DataType::kFloat32));
        absl::StatusOr<absl::Span<float>> x = (*c)->AllocateTensor("x");
        absl::StatusOr<absl::Span<float>> g = (*c)->AllocateTensor("x");
        if (!x.ok()) return x.status();
        if (!g.ok()) return g.status();
        if (me == 0) {
          for (int k = 0; k < kDim; ++k) (*x)[k] = 1.0f + 0.5f * k;
          TRAINING_TEST_RETURN_IF_ERROR(
              (*c)->SetInitialParameters({{"x", *x}}));
        }
        if (!victim) {
          TRAINING_TEST_RETURN_IF_ERROR(train(**c, me, 0, kSteps, *x, *g));
          return (*c)->Finish();
        }
        // The victim: steps 0 .. kLeaveAfter - 1, then it leaves without
        // Finish() (its Client goes away).
        for (int step = 0; step < kLeaveAfter; ++step) {
          TRAINING_TEST_RETURN_IF_ERROR(
              (*c)->PullParameters(step, {{"x", *x}}));
          for (int k = 0; k < kDim; ++k) (*g)[k] = gradient(me, step, k);
          TRAINING_TEST_RETURN_IF_ERROR((*c)->PushGradients(step, {{"x", *g}}));
        }
        c->reset();
        // The daemon shows the slot missing (no sleep: status polling).
        proto::NodeStatusReply status;
        if (!cluster.WaitForNode(
                victim_daemon, absl::Seconds(20),
                [&](const proto::NodeStatusReply& s) {
                  for (const proto::WorkerStatus& w : s.workers()) {
                    if (w.index() == victim_index &&
                        w.state() == proto::WorkerStatus::STATE_MISSING) {
                      return true;
                    }
                  }
                  return false;
                },
                &status)) {
          return Mismatch(
              absl::StrCat("the victim's slot never showed "
                           "missing: ",
                           status.DebugString()));
        }
        absl::StatusOr<std::unique_ptr<client::Client>> r =
            ConnectWorker(cluster, d, i);
        if (!r.ok()) return r.status();
        TRAINING_TEST_RETURN_IF_ERROR(
            (*r)->DeclareTensor("x", {kDim}, client::DataType::kFloat32));
        absl::StatusOr<absl::Span<float>> rx = (*r)->AllocateTensor("x");
        absl::StatusOr<absl::Span<float>> rg = (*r)->AllocateTensor("x");
        if (!rx.ok()) return rx.status();
        if (!rg.ok()) return rg.status();
        // The first data op ends the declarations: first_step is final.
        TRAINING_TEST_RETURN_IF_ERROR(
            (*r)->PullParameters(kLeaveAfter, {{"x", *rx}}));
        {
          absl::MutexLock lock(&mu);
          replacement_first_step = (*r)->first_step();
          replacement_first_pull.assign(rx->begin(), rx->end());
        }
        if ((*r)->first_step() != kLeaveAfter) {
          return Mismatch(absl::StrCat("replacement first_step ",
                                       (*r)->first_step(), ", want ",
                                       kLeaveAfter));
        }
        TRAINING_TEST_RETURN_IF_ERROR(
            train(**r, me, kLeaveAfter, kSteps, *rx, *rg));
        return (*r)->Finish();
      });
  ExpectAllOk(results, cluster);
  const int victim = victim_daemon * options.local_workers + victim_index;
  EXPECT_EQ(replacement_first_step, kLeaveAfter);
  ASSERT_EQ(pulled[0][kLeaveAfter].size(), static_cast<size_t>(kDim));
  EXPECT_TRUE(CompareBits("replacement's first pull", replacement_first_pull,
                          pulled[0][kLeaveAfter])
                  .ok());
  // Every worker pulled the same parameters at every version, the
  // replacement included from kLeaveAfter on.
  for (size_t w = 0; w < pulled.size(); ++w) {
    for (int v = static_cast<int>(w) == victim ? kLeaveAfter : 0; v <= kSteps;
         ++v) {
      EXPECT_EQ(pulled[w][v], pulled[0][v])
          << "worker " << w << " version " << v;
    }
  }
  // And it is the fp64 reference (dyadic values: exact in float32).
  std::vector<double> x(kDim);
  for (int k = 0; k < kDim; ++k) x[k] = 1.0 + 0.5 * k;
  for (int step = 0; step < kSteps; ++step) {
    for (int k = 0; k < kDim; ++k) {
      double sum = 0;
      for (int me = 0; me < 4; ++me) sum += gradient(me, step, k);
      x[k] -= 0.5 * sum / 4;
    }
  }
  std::vector<float> want(x.begin(), x.end());
  EXPECT_EQ(pulled[0][kSteps], want);
}

// ---------------------------------------------------------------------------
// 3. Bucketed part pushes equal one push.

struct BucketTensor {
  const char* name;
  int64_t elements;
};
// With bucket_bytes 4096, last declared first: {d} (4400 bytes), {c}
// (20000 bytes), {b, a} (68 + 12000 bytes): three buckets, one of two
// tensors.
constexpr BucketTensor kBucketTensors[] = {
    {"a", 3000}, {"b", 17}, {"c", 5000}, {"d", 1100}};
constexpr int kBucketSteps = 5;

// Deterministic pseudo-random gradient in [-1, 1).
float PseudoRandom(int worker, int step, int tensor, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(worker) * 1000003u) ^
               (static_cast<uint64_t>(step) * 7919u) ^
               (static_cast<uint64_t>(tensor) << 40) ^ static_cast<uint64_t>(i);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return static_cast<float>(static_cast<double>(h >> 40) / (1ull << 23) - 1.0);
}

// One run of kBucketSteps steps; returns every worker's final parameters
// (rank-major, tensors in declaration order, concatenated).
std::vector<std::vector<float>> BucketRun(NodeCluster& cluster,
                                          size_t bucket_bytes, bool parts) {
  const ClusterOptions& options = cluster.options();
  std::vector<std::vector<float>> finals(options.daemons *
                                         options.local_workers);
  std::vector<absl::Status> results =
      RunWorkers(options.daemons, options.local_workers, [&](int d, int i) {
        const int me = d * options.local_workers + i;
        absl::StatusOr<std::unique_ptr<client::Client>> c =
            ConnectWorker(cluster, d, i, bucket_bytes);
        if (!c.ok()) return c.status();
        client::Client& client = **c;
        std::vector<absl::Span<float>> x, g;
        for (const BucketTensor& t : kBucketTensors) {
          TRAINING_TEST_RETURN_IF_ERROR(client.DeclareTensor(
              t.name, {t.elements}, client::DataType::kFloat32));
        }
        for (const BucketTensor& t : kBucketTensors) {
          absl::StatusOr<absl::Span<float>> xs = client.AllocateTensor(t.name);
          absl::StatusOr<absl::Span<float>> gs = client.AllocateTensor(t.name);
          if (!xs.ok()) return xs.status();
          if (!gs.ok()) return gs.status();
          x.push_back(*xs);
          g.push_back(*gs);
        }
        std::vector<client::Tensor> params, grads;
        for (size_t t = 0; t < x.size(); ++t) {
          params.emplace_back(kBucketTensors[t].name, x[t]);
          grads.emplace_back(kBucketTensors[t].name, g[t]);
        }
        for (int step = 0; step < kBucketSteps; ++step) {
          TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(step, params));
          for (size_t t = 0; t < g.size(); ++t) {
            for (size_t k = 0; k < g[t].size(); ++k) {
              // Depends on the parameters too, so that a wrong update
              // shows in the next steps.
              g[t][k] = PseudoRandom(me, step, static_cast<int>(t), k) +
                        0.5f * x[t][k];
            }
          }
          if (!parts) {
            TRAINING_TEST_RETURN_IF_ERROR(client.PushGradients(step, grads));
            continue;
          }
          // Backward order: the last declared tensor first, one at a time.
          std::vector<client::Future> futures;
          for (int t = static_cast<int>(grads.size()) - 1; t >= 0; --t) {
            futures.push_back(client.PushGradientsPartAsync(step, {grads[t]}));
          }
          for (const client::Future& f : futures) {
            TRAINING_TEST_RETURN_IF_ERROR(f.Wait(absl::Seconds(30)));
          }
        }
        TRAINING_TEST_RETURN_IF_ERROR(
            client.PullParameters(kBucketSteps, params));
        for (const absl::Span<float>& s : x) {
          finals[me].insert(finals[me].end(), s.begin(), s.end());
        }
        return client.Finish();
      });
  ExpectAllOk(results, cluster);
  return finals;
}

TEST(TrainingApi, BucketedPartPushesEqualOnePush) {
  ClusterOptions options = ApiOptions(2, 2, 0.1);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();

  // Runs follow one another on the same daemons.
  const std::vector<std::vector<float>> bucketed =
      BucketRun(cluster, 4096, /*parts=*/true);
  const double steps_after_first =
      Metric(cluster.metrics_port(0), "starling_node_steps_total");
  const std::vector<std::vector<float>> whole =
      BucketRun(cluster, 0, /*parts=*/false);
  const double steps_after_second =
      Metric(cluster.metrics_port(0), "starling_node_steps_total");

  int64_t total = 0;
  for (const BucketTensor& t : kBucketTensors) total += t.elements;
  for (size_t w = 0; w < bucketed.size(); ++w) {
    ASSERT_EQ(bucketed[w].size(), static_cast<size_t>(total)) << "worker " << w;
    ASSERT_EQ(whole[w].size(), static_cast<size_t>(total)) << "worker " << w;
    const absl::Status same =
        CompareBits(absl::StrCat("worker ", w, " bucketed vs one push"),
                    bucketed[w], whole[w]);
    EXPECT_TRUE(same.ok()) << same;
    EXPECT_TRUE(CompareBits("worker vs worker 0", whole[w], whole[0]).ok());
  }
  // Not a constant: the steps moved the parameters.
  int64_t nonzero = 0;
  for (float v : whole[0]) nonzero += v != 0.0f;
  EXPECT_GT(nonzero, total / 2);
  // One step counted per step, not per bucket.
  EXPECT_EQ(steps_after_first, kBucketSteps);
  EXPECT_EQ(steps_after_second, 2 * kBucketSteps);
}

// ---------------------------------------------------------------------------
// 4. Part-push and initial-parameter errors.

TEST(TrainingApi, PartPushErrors) {
  ClusterOptions options = ApiOptions(1, 1, 0.5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();

  absl::StatusOr<std::unique_ptr<client::Client>> c =
      ConnectWorker(cluster, 0, 0);
  ASSERT_TRUE(c.ok()) << c.status() << cluster.ServerLogs();
  client::Client& client = **c;
  ASSERT_TRUE(client.DeclareTensor("x", {10}, client::DataType::kFloat32).ok());
  ASSERT_TRUE(client.DeclareTensor("y", {20}, client::DataType::kFloat32).ok());
  ASSERT_TRUE(client.DeclareTensor("h", {4}, client::DataType::kFloat16).ok());

  // AllocateTensor on a float16 tensor names AllocateTensor16.
  absl::StatusOr<absl::Span<float>> wrong = client.AllocateTensor("h");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(),
              AllOf(HasSubstr("'h'"), HasSubstr("AllocateTensor16")));

  absl::StatusOr<absl::Span<float>> x = client.AllocateTensor("x");
  absl::StatusOr<absl::Span<float>> y = client.AllocateTensor("y");
  absl::StatusOr<absl::Span<uint16_t>> h = client.AllocateTensor16("h");
  absl::StatusOr<absl::Span<float>> short_x = client.Allocate(5);
  ASSERT_TRUE(x.ok() && y.ok() && h.ok() && short_x.ok());

  // SetInitialParameters with a buffer of the wrong size names the tensor.
  absl::Status status = client.SetInitialParameters({{"x", *short_x}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("'x'"));

  for (float& v : *x) v = 2.0f;
  ASSERT_TRUE(client.SetInitialParameters({{"x", *x}}).ok());
  ASSERT_TRUE(client.PullParameters(0, {{"x", *x}, {"y", *y}}).ok())
      << cluster.ServerLogs();
  EXPECT_THAT(std::vector<float>(x->begin(), x->end()), ::testing::Each(2.0f));
  // After the first pull: too late.
  status = client.SetInitialParameters({{"x", *x}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;

  client::Future first = client.PushGradientsPartAsync(0, {{"x", *x}});
  // The same tensor twice in one step.
  client::Future twice = client.PushGradientsPartAsync(0, {{"x", *x}});
  status = twice.Wait(absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("'x'"));
  // A part of step 1 while step 0 is incomplete.
  client::Future early = client.PushGradientsPartAsync(1, {{"y", *y}});
  status = early.Wait(absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("step 0"));

  // The step goes on: the rest of step 0 completes it.
  for (float& v : *y) v = 1.0f;
  client::Future rest =
      client.PushGradientsPartAsync(0, {{"y", *y}, {"h", *h}});
  EXPECT_TRUE(first.Wait(absl::Seconds(30)).ok()) << cluster.ServerLogs();
  EXPECT_TRUE(rest.Wait(absl::Seconds(30)).ok()) << cluster.ServerLogs();
  ASSERT_TRUE(client.PullParameters(1, {{"x", *x}, {"y", *y}}).ok());
  // x: 2 - 0.5 * 2 (the gradient was the pulled x); y: 0 - 0.5 * 1.
  EXPECT_THAT(std::vector<float>(x->begin(), x->end()), ::testing::Each(1.0f));
  EXPECT_THAT(std::vector<float>(y->begin(), y->end()), ::testing::Each(-0.5f));
  EXPECT_TRUE(client.Finish().ok()) << cluster.ServerLogs();
}

// Initial parameters holding NaN or infinity would train on NaN with no
// error anywhere: the run does not begin, every worker is told which
// tensor and element, and the daemon serves the next run.
TEST(TrainingApi, NonFiniteInitialParametersAreRefused) {
  ClusterOptions options = ApiOptions(1, 1, 0.5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  {
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        ConnectWorker(cluster, 0, 0);
    ASSERT_TRUE(c.ok()) << c.status() << cluster.ServerLogs();
    client::Client& client = **c;
    ASSERT_TRUE(
        client.DeclareTensor("x", {10}, client::DataType::kFloat32).ok());
    absl::StatusOr<absl::Span<float>> x = client.AllocateTensor("x");
    ASSERT_TRUE(x.ok());
    for (float& v : *x) v = 1.0f;
    (*x)[3] = std::nanf("");
    const absl::Status set = client.SetInitialParameters({{"x", *x}});
    absl::Status status =
        set.ok() ? client.PullParameters(0, {{"x", *x}}) : set;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("initial parameters of tensor 'x'"),
                      HasSubstr("element 3 of 10 is nan")))
        << status;
  }
  // The daemon serves on: a worker with finite values trains.
  absl::StatusOr<std::unique_ptr<client::Client>> c =
      ConnectWorker(cluster, 0, 0);
  ASSERT_TRUE(c.ok()) << c.status() << cluster.ServerLogs();
  ASSERT_TRUE((*c)->DeclareTensor("x", {10}, client::DataType::kFloat32).ok());
  absl::StatusOr<absl::Span<float>> x = (*c)->AllocateTensor("x");
  ASSERT_TRUE(x.ok());
  for (float& v : *x) v = 1.0f;
  ASSERT_TRUE((*c)->SetInitialParameters({{"x", *x}}).ok());
  ASSERT_TRUE((*c)->PullParameters(0, {{"x", *x}}).ok())
      << cluster.ServerLogs();
  EXPECT_THAT(std::vector<float>(x->begin(), x->end()), ::testing::Each(1.0f));
  EXPECT_TRUE((*c)->PushGradients(0, {{"x", *x}}).ok());
  EXPECT_TRUE((*c)->Finish().ok()) << cluster.ServerLogs();
}

// ---------------------------------------------------------------------------
// 5. 16-bit tensors keep a float32 master.

using Narrow = void (*)(absl::Span<const float>, absl::Span<uint16_t>);

// A run of `steps` steps on every worker of `cluster` (each daemon x 1
// worker): tensor "h" {8} of `dtype` (and, if `mixed`, "f" {8} float32),
// initial parameters 1.0, gradient 1e-4 (in the tensor's type) at every
// step, SGD lr 1. Each pull is checked against the fp64 reference rounded
// to the tensor's type. Returns the pulled bits of "h" after `steps`.
std::vector<uint16_t> SixteenBitRun(NodeCluster& cluster, DataType dtype,
                                    Narrow narrow, int steps, bool mixed) {
  constexpr int kDim = 8;
  const ClusterOptions& options = cluster.options();
  std::vector<std::vector<uint16_t>> finals(options.daemons);
  std::vector<absl::Status> results =
      RunWorkers(options.daemons, 1, [&](int d, int i) {
        absl::StatusOr<std::unique_ptr<client::Client>> c =
            ConnectWorker(cluster, d, i);
        if (!c.ok()) return c.status();
        client::Client& client = **c;
        if (mixed) {
          TRAINING_TEST_RETURN_IF_ERROR(
              client.DeclareTensor("f", {kDim}, DataType::kFloat32));
        }
        TRAINING_TEST_RETURN_IF_ERROR(client.DeclareTensor("h", {kDim}, dtype));
        absl::StatusOr<absl::Span<uint16_t>> h = client.AllocateTensor16("h");
        absl::StatusOr<absl::Span<uint16_t>> gh = client.AllocateTensor16("h");
        absl::StatusOr<absl::Span<float>> f = client.Allocate(kDim);
        absl::StatusOr<absl::Span<float>> gf = client.Allocate(kDim);
        for (const auto* s : {&h, &gh}) {
          if (!s->ok()) return s->status();
        }
        for (const auto* s : {&f, &gf}) {
          if (!s->ok()) return s->status();
        }
        const std::vector<float> ones(kDim, 1.0f), grad(kDim, 1e-4f);
        narrow(ones, *h);
        narrow(grad, *gh);
        for (int k = 0; k < kDim; ++k) {
          (*f)[k] = 1.0f;
          (*gf)[k] = 1e-4f;
        }
        std::vector<client::Tensor> params = {{"h", *h}};
        std::vector<client::Tensor> grads = {{"h", *gh}};
        if (mixed) {
          params.emplace_back("f", *f);
          grads.emplace_back("f", *gf);
        }
        if (d == 0) {
          TRAINING_TEST_RETURN_IF_ERROR(client.SetInitialParameters(params));
        }
        // The gradient as the daemons see it, widened.
        const double g16 = [&] {
          float wide = 0;
          if (dtype == DataType::kFloat16) {
            client::FromFloat16(absl::MakeConstSpan(&(*gh)[0], 1),
                                absl::MakeSpan(&wide, 1));
          } else {
            client::FromBFloat16(absl::MakeConstSpan(&(*gh)[0], 1),
                                 absl::MakeSpan(&wide, 1));
          }
          return static_cast<double>(wide);
        }();
        float f_ref = 1.0f;  // the float32 master of "f", step by step
        for (int step = 0; step <= steps; ++step) {
          TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(step, params));
          const float want_wide = static_cast<float>(1.0 - step * g16);
          std::vector<uint16_t> want(kDim);
          narrow(std::vector<float>(kDim, want_wide), absl::MakeSpan(want));
          TRAINING_TEST_RETURN_IF_ERROR(CompareBits16(
              absl::StrCat("rank ", d, " h version ", step), *h, want));
          if (mixed) {
            TRAINING_TEST_RETURN_IF_ERROR(
                CompareBits(absl::StrCat("rank ", d, " f version ", step), *f,
                            std::vector<float>(kDim, f_ref)));
            f_ref -= 1e-4f;
          }
          if (step == steps) break;
          TRAINING_TEST_RETURN_IF_ERROR(client.PushGradients(step, grads));
        }
        finals[d].assign(h->begin(), h->end());
        return client.Finish();
      });
  ExpectAllOk(results, cluster);
  return finals[0];
}

TEST(TrainingApi, Float16GradientsKeepAFloat32Master) {
  ClusterOptions options = ApiOptions(2, 1, 1.0);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();

  // float16: 1 - 20 * 1.0002e-4 = 0.998 -> 0.99805 (0x3BFC); a float16
  // master would stay at 1.0 (1e-4 is below half an ulp of 1.0, 2.4e-4).
  std::vector<uint16_t> h =
      SixteenBitRun(cluster, DataType::kFloat16, client::ToFloat16, 20, false);
  ASSERT_EQ(h.size(), 8u);
  EXPECT_EQ(h[0], 0x3BFC);
  float wide = 0;
  client::FromFloat16(absl::MakeConstSpan(&h[0], 1), absl::MakeSpan(&wide, 1));
  EXPECT_LT(wide, 1.0f);
  EXPECT_FLOAT_EQ(wide, 0.998046875f);

  // bfloat16: 1 - 40 * 1.0014e-4 = 0.99600 -> 0.99609375 (0x3F7F); half an
  // ulp of 1.0 is 1.95e-3.
  h = SixteenBitRun(cluster, DataType::kBFloat16, client::ToBFloat16, 40,
                    false);
  ASSERT_EQ(h.size(), 8u);
  EXPECT_EQ(h[0], 0x3F7F);

  // Mixed float32 + float16 (float32 wire): both tensors right.
  h = SixteenBitRun(cluster, DataType::kFloat16, client::ToFloat16, 20, true);
  ASSERT_EQ(h.size(), 8u);
  EXPECT_EQ(h[0], 0x3BFC);
}

// ---------------------------------------------------------------------------
// 6. Async SGD's staleness bound is enforced by the daemons.

TEST(TrainingApi, AsyncStalenessIsEnforcedByTheDaemons) {
  ClusterOptions options = ApiOptions(2, 1, 0.5);
  options.mode = "async_sgd";
  NodeCluster cluster(options);
  cluster.StartCoordinatorWith("coordinator", {"--staleness=1"});
  cluster.StartDaemons();
  constexpr int kSteps = 6;
  constexpr int kDim = 16;

  absl::Notification a_waits_for_step_2;  // A's pull(2) is outstanding

  std::vector<absl::Status> results = RunWorkers(2, 1, [&](int d, int) {
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        ConnectWorker(cluster, d, 0);
    if (!c.ok()) return c.status();
    client::Client& client = **c;
    if (client.mode() != "async_sgd" || client.staleness() != 1) {
      return Mismatch(absl::StrCat("mode ", client.mode(), " staleness ",
                                   client.staleness()));
    }
    TRAINING_TEST_RETURN_IF_ERROR(
        client.DeclareTensor("x", {kDim}, DataType::kFloat32));
    absl::StatusOr<absl::Span<float>> x = client.AllocateTensor("x");
    absl::StatusOr<absl::Span<float>> g = client.AllocateTensor("x");
    if (!x.ok()) return x.status();
    if (!g.ok()) return g.status();
    for (float& v : *g) v = 1.0f;
    int first = 0;
    std::vector<client::Future> pushes;
    if (d == 0) {
      // A: two steps ahead of B.
      TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(0, {{"x", *x}}));
      pushes.push_back(client.PushGradientsAsync(0, {{"x", *g}}));
      // Step 1 needs version 0: at once.
      client::Future pull1 = client.PullParametersAsync(1, {{"x", *x}});
      TRAINING_TEST_RETURN_IF_ERROR(pull1.Wait(absl::Seconds(10)));
      if (client.last_pulled_version() != 0) {
        return Mismatch(absl::StrCat("pull for step 1 returned version ",
                                     client.last_pulled_version(),
                                     " before B pushed"));
      }
      pushes.push_back(client.PushGradientsAsync(1, {{"x", *g}}));
      // Step 2 needs version 1, which needs B's step 0: B has pushed
      // nothing yet, so it cannot be ready.
      client::Future pull2 = client.PullParametersAsync(2, {{"x", *x}});
      const bool ready_too_early = pull2.Poll();
      a_waits_for_step_2.Notify();
      if (ready_too_early) {
        return Mismatch("pull for step 2 was ready before B pushed step 0");
      }
      TRAINING_TEST_RETURN_IF_ERROR(pull2.Wait(absl::Seconds(20)));
      if (client.last_pulled_version() < 1) {
        return Mismatch(absl::StrCat("pull for step 2 returned version ",
                                     client.last_pulled_version()));
      }
      first = 2;
    } else {
      // B: its first op waits for the run (A's declarations ended too).
      TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(0, {{"x", *x}}));
      a_waits_for_step_2.WaitForNotification();
    }
    for (int step = first; step < kSteps; ++step) {
      if (d != 0 || step > first) {
        TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(step, {{"x", *x}}));
      }
      const int64_t stale = step - client.last_pulled_version();
      if (stale < 0 || stale > 1) {
        return Mismatch(absl::StrCat("rank ", d, " step ", step,
                                     " pulled version ",
                                     client.last_pulled_version()));
      }
      pushes.push_back(client.PushGradientsAsync(step, {{"x", *g}}));
    }
    for (const client::Future& f : pushes) {
      TRAINING_TEST_RETURN_IF_ERROR(f.Wait(absl::Seconds(30)));
    }
    TRAINING_TEST_RETURN_IF_ERROR(client.PullParameters(kSteps, {{"x", *x}}));
    // kSteps updates of lr 0.5 * mean(1, 1) from 0.
    TRAINING_TEST_RETURN_IF_ERROR(
        CompareBits(absl::StrCat("rank ", d, " final x"), *x,
                    std::vector<float>(kDim, -0.5f * kSteps)));
    return client.Finish();
  });
  ExpectAllOk(results, cluster);

  // Every push of a worker that pulled before it is observed, none staler
  // than the bound.
  for (int d = 0; d < 2; ++d) {
    const int port = cluster.metrics_port(d);
    const double count = Metric(port, "starling_node_push_staleness_count");
    const double within =
        Metric(port, "starling_node_push_staleness_bucket", {"le=\"1\""});
    EXPECT_EQ(count, kSteps) << "rank " << d;
    EXPECT_EQ(within, count) << "rank " << d;
  }
}

// ---------------------------------------------------------------------------
// 7. The coordinator's schedule comes through the daemon.

TEST(TrainingApi, ScheduleComesThroughTheDaemon) {
  ClusterOptions options = ApiOptions(2, 1);
  NodeCluster cluster(options);
  cluster.StartCoordinatorWith("coordinator",
                               {"--partitions_per_epoch=10", "--epochs=2",
                                "--iterations_per_schedule=4"});
  cluster.StartDaemons();
  // W = 2 workers, P = 10: 5 iterations per epoch, 10 in all; in
  // iteration i of an epoch worker w reads partition i * 2 + w.
  std::vector<absl::Status> results = RunWorkers(2, 1, [&](int d, int) {
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        ConnectWorker(cluster, d, 0);
    if (!c.ok()) return c.status();
    client::Client& client = **c;
    TRAINING_TEST_RETURN_IF_ERROR(
        client.DeclareTensor("x", {4}, DataType::kFloat32));
    const uint64_t w = static_cast<uint64_t>(d);
    struct Want {
      int64_t iteration, epoch, in_epoch;
      std::vector<uint64_t> partitions;
    };
    auto check = [&](int64_t from, const std::vector<Want>& want,
                     bool done) -> absl::Status {
      absl::StatusOr<client::Schedule> s = client.GetSchedule(from);
      if (!s.ok()) return s.status();
      const std::string where =
          absl::StrCat("rank ", d, " schedule from ", from);
      if (s->partitions_per_epoch != 10 || s->epochs != 2 ||
          s->iterations_per_epoch != 5 || s->done != done ||
          s->iterations.size() != want.size()) {
        return Mismatch(absl::StrCat(
            where, ": partitions_per_epoch ", s->partitions_per_epoch,
            " epochs ", s->epochs, " iterations_per_epoch ",
            s->iterations_per_epoch, " done ", s->done, " iterations ",
            s->iterations.size(), ", want ", want.size()));
      }
      for (size_t k = 0; k < want.size(); ++k) {
        const client::ScheduledIteration& it = s->iterations[k];
        if (it.iteration != want[k].iteration || it.epoch != want[k].epoch ||
            it.iteration_in_epoch != want[k].in_epoch ||
            it.partitions != want[k].partitions) {
          return Mismatch(absl::StrCat(
              where, ": iteration ", it.iteration, " epoch ", it.epoch,
              " in epoch ", it.iteration_in_epoch, " partitions [",
              absl::StrJoin(it.partitions, ","), "], want iteration ",
              want[k].iteration, " epoch ", want[k].epoch, " in epoch ",
              want[k].in_epoch, " partitions [",
              absl::StrJoin(want[k].partitions, ","), "]"));
        }
      }
      return absl::OkStatus();
    };
    TRAINING_TEST_RETURN_IF_ERROR(check(0,
                                        {{0, 0, 0, {0 + w}},
                                         {1, 0, 1, {2 + w}},
                                         {2, 0, 2, {4 + w}},
                                         {3, 0, 3, {6 + w}}},
                                        false));
    // Across the epoch boundary.
    TRAINING_TEST_RETURN_IF_ERROR(check(4,
                                        {{4, 0, 4, {8 + w}},
                                         {5, 1, 0, {0 + w}},
                                         {6, 1, 1, {2 + w}},
                                         {7, 1, 2, {4 + w}}},
                                        false));
    // The end: two iterations left, nothing follows.
    TRAINING_TEST_RETURN_IF_ERROR(
        check(8, {{8, 1, 3, {6 + w}}, {9, 1, 4, {8 + w}}}, true));
    TRAINING_TEST_RETURN_IF_ERROR(check(10, {}, true));
    return client.Finish();
  });
  ExpectAllOk(results, cluster);
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
