// Each optimizer, run the way the node daemons run it (the parameter vector
// split over ranks by ShardLayout, one optimizer per shard, gradients summed
// over workers and scaled by 1 / workers), minimises the quadratic
//   f(x) = 0.5 * sum_i a_i * (x_i - b_i)^2,   grad_i = a_i * (x_i - b_i)
// with a_i in [0.5, 2] (condition number 4), from x = 0.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/shard_layout.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/optimizer/optimizer_factory.h"

namespace starling {
namespace shard {
namespace {

constexpr size_t kElements = 101;
constexpr int kRanks = 3;
constexpr int kWorkers = 4;

struct Quadratic {
  std::vector<float> a, b;

  Quadratic() : a(kElements), b(kElements) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> curvature(0.5f, 2.0f);
    std::uniform_real_distribution<float> target(-3.0f, 3.0f);
    for (size_t i = 0; i < kElements; ++i) {
      a[i] = curvature(rng);
      b[i] = target(rng);
    }
  }

  double MaxError(const std::vector<float>& x) const {
    double max = 0;
    for (size_t i = 0; i < kElements; ++i) {
      max = std::max(max, std::fabs(static_cast<double>(x[i]) - b[i]));
    }
    return max;
  }
};

// Runs `steps` synchronous steps and returns max_i |x_i - b_i|.
double Minimise(OptimizerOptions options, int steps) {
  const Quadratic q;
  const collective::ShardLayout layout(kElements, kRanks);
  options.gradient_scale = 1.0f / kWorkers;
  std::vector<std::unique_ptr<Optimizer>> shards;
  for (int rank = 0; rank < kRanks; ++rank) {
    absl::StatusOr<std::unique_ptr<Optimizer>> opt =
        CreateOptimizer(options, layout.Size(rank));
    EXPECT_OK(opt);
    if (!opt.ok()) return INFINITY;
    shards.push_back(*std::move(opt));
  }
  std::vector<float> x(kElements, 0.0f);
  std::vector<float> grad_sum(kElements);
  for (int step = 1; step <= steps; ++step) {
    // Local reduce + reduce-scatter: the sum over the workers' gradients.
    std::fill(grad_sum.begin(), grad_sum.end(), 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < kElements; ++i) {
        grad_sum[i] += q.a[i] * (x[i] - q.b[i]);
      }
    }
    // Each rank updates its shard in place; x is already "all-gathered".
    for (int rank = 0; rank < kRanks; ++rank) {
      absl::Span<float> params =
          absl::MakeSpan(x).subspan(layout.Begin(rank), layout.Size(rank));
      absl::Span<const float> grads = absl::MakeConstSpan(grad_sum).subspan(
          layout.Begin(rank), layout.Size(rank));
      const absl::Status status = shards[rank]->Apply(params, grads, step);
      EXPECT_OK(status);
      if (!status.ok()) return INFINITY;
    }
  }
  return q.MaxError(x);
}

TEST(Convergence, SgdReachesTheOptimum) {
  OptimizerOptions options;
  options.name = "sgd";
  options.learning_rate = 0.5f;  // contraction max |1 - lr * a_i| = 0.75
  EXPECT_LT(Minimise(options, 200), 1e-5);
}

TEST(Convergence, MomentumReachesTheOptimum) {
  OptimizerOptions options;
  options.name = "momentum";
  options.learning_rate = 0.1f;
  options.momentum = 0.9f;
  EXPECT_LT(Minimise(options, 400), 1e-5);
  options.nesterov = true;
  EXPECT_LT(Minimise(options, 400), 1e-5);
}

TEST(Convergence, AdamReachesTheOptimum) {
  OptimizerOptions options;
  options.name = "adam";
  options.learning_rate = 0.05f;
  EXPECT_LT(Minimise(options, 3000), 1e-3);
}

}  // namespace
}  // namespace shard
}  // namespace starling
