#include "server/shard/optimizer/adam.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace shard {
namespace {

// fp32 results must match the fp64 reference to within
// kTolerance * max(1, |reference|). Adam divides by sqrt(v): a few float
// roundings per element per step, each ~6e-8 relative.
constexpr double kTolerance = 2e-5;

// Independent fp64 Adam in the paper's form (Algorithm 1) with L2 decay.
struct ReferenceAdam {
  double lr, b1, b2, eps, scale, wd;
  std::vector<double> m, v;

  void Step(std::vector<double>& p, const std::vector<float>& grads,
            int64_t t) {
    if (m.empty()) {
      m.assign(p.size(), 0.0);
      v.assign(p.size(), 0.0);
    }
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = scale * grads[i] + wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

TEST(AdamOptimizer, MatchesFp64ReferenceWithBiasCorrection) {
  constexpr size_t kN = 777;
  OptimizerOptions options;
  options.learning_rate = 0.01f;
  options.beta1 = 0.9f;
  options.beta2 = 0.99f;
  options.epsilon = 1e-6f;
  options.weight_decay = 0.01f;
  options.gradient_scale = 1.0f / 3.0f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> adam,
                       AdamOptimizer::Create(options, kN));
  // The reference uses the same float hyperparameters, widened.
  ReferenceAdam ref{options.learning_rate,
                    options.beta1,
                    options.beta2,
                    options.epsilon,
                    options.gradient_scale,
                    options.weight_decay,
                    {},
                    {}};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> params(kN);
  for (float& p : params) p = dist(rng);
  std::vector<double> ref_params(params.begin(), params.end());
  for (int64_t step = 1; step <= 12; ++step) {
    std::vector<float> grads(kN);
    for (float& g : grads) g = 3.0f * dist(rng);
    ASSERT_OK(adam->Apply(absl::MakeSpan(params), grads, step));
    ref.Step(ref_params, grads, step);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(params[i], ref_params[i],
                  kTolerance * std::max(1.0, std::fabs(ref_params[i])))
          << "step " << step << " element " << i;
    }
  }
  // State is m then v.
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_NEAR(adam->state()[i], ref.m[i], kTolerance);
    ASSERT_NEAR(adam->state()[kN + i], ref.v[i], kTolerance);
  }
}

TEST(AdamOptimizer, FirstStepMovesByAboutTheLearningRate) {
  // With bias correction, m_hat / sqrt(v_hat) = g / |g| on step 1.
  OptimizerOptions options;
  options.learning_rate = 0.001f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> adam,
                       AdamOptimizer::Create(options, 3));
  std::vector<float> params = {0, 0, 0};
  ASSERT_OK(adam->Apply(absl::MakeSpan(params), {5.0f, -0.01f, 1e3f}, 1));
  EXPECT_NEAR(params[0], -0.001f, 1e-7f);
  EXPECT_NEAR(params[1], 0.001f, 1e-7f);
  EXPECT_NEAR(params[2], -0.001f, 1e-7f);
}

TEST(AdamOptimizer, UsesTheStepItIsGiven) {
  // Restored at step 1000 with the state of a run that saw the same gradient
  // throughout: the bias correction is negligible there, unlike at step 2.
  OptimizerOptions options;
  options.learning_rate = 0.1f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> a,
                       AdamOptimizer::Create(options, 1));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> b,
                       AdamOptimizer::Create(options, 1));
  std::vector<float> pa = {0}, pb = {0};
  ASSERT_OK(a->Apply(absl::MakeSpan(pa), {1.0f}, 1));
  ASSERT_OK(b->Apply(absl::MakeSpan(pb), {1.0f}, 1));
  ASSERT_OK(a->Apply(absl::MakeSpan(pa), {1.0f}, 2));
  ASSERT_OK(b->Apply(absl::MakeSpan(pb), {1.0f}, 1000));
  // Step 2: m_hat = v_hat = 1, a full step of 0.1.
  EXPECT_NEAR(pa[0], -0.2f, 1e-6f);
  // Step 1000: m = 0.19, v = 0.001999, corrections ~1 and ~0.632.
  const double m = 0.19, v = 0.001999;
  const double expected =
      -0.1 - 0.1 * (m / (1 - std::pow(0.9, 1000))) /
                 (std::sqrt(v / (1 - std::pow(0.999, 1000))) + 1e-8);
  EXPECT_NEAR(pb[0], expected, 1e-5);
}

TEST(AdamOptimizer, HoldsTwoFloatsOfStatePerElement) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> adam,
                       AdamOptimizer::Create(OptimizerOptions(), 1000));
  EXPECT_EQ(adam->StateBytes(), 1000u * 2u * 4u);
  EXPECT_EQ(adam->name(), "adam");
}

TEST(AdamOptimizer, NanGradientLeavesParamsAndStateUnchanged) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamOptimizer> adam,
                       AdamOptimizer::Create(OptimizerOptions(), 3));
  std::vector<float> params = {1, 2, 3};
  ASSERT_OK(adam->Apply(absl::MakeSpan(params), {1, 1, 1}, 1));
  const std::vector<float> params_before = params;
  const std::vector<float> state_before(adam->state().begin(),
                                        adam->state().end());
  EXPECT_THAT(adam->Apply(absl::MakeSpan(params), {NAN, 1, 1}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "adam step 2: gradient element 0 of 3 is nan"));
  EXPECT_EQ(params, params_before);
  EXPECT_EQ(std::vector<float>(adam->state().begin(), adam->state().end()),
            state_before);
}

}  // namespace
}  // namespace shard
}  // namespace starling
