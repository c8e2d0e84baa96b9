#include "server/shard/optimizer/momentum.h"

#include <cmath>
#include <limits>
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

using ::testing::HasSubstr;

// fp32 results must match the fp64 reference to within
// kTolerance * max(1, |reference|).
constexpr double kTolerance = 1e-5;

// Independent fp64 momentum SGD (torch.optim.SGD, dampening 0).
struct ReferenceMomentum {
  double lr, mu, scale, wd;
  bool nesterov;
  std::vector<double> v;

  void Step(std::vector<double>& p, const std::vector<float>& grads) {
    if (v.empty()) v.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = scale * grads[i] + wd * p[i];
      v[i] = mu * v[i] + g;
      p[i] -= lr * (nesterov ? g + mu * v[i] : v[i]);
    }
  }
};

void RunAgainstReference(bool nesterov) {
  constexpr size_t kN = 517;
  OptimizerOptions options;
  options.learning_rate = 0.05f;
  options.momentum = 0.9f;
  options.nesterov = nesterov;
  options.weight_decay = 0.001f;
  options.gradient_scale = 0.5f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MomentumOptimizer> opt,
                       MomentumOptimizer::Create(options, kN));
  ReferenceMomentum ref{0.05, 0.9, 0.5, 0.001, nesterov, {}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> params(kN);
  for (float& p : params) p = dist(rng);
  std::vector<double> ref_params(params.begin(), params.end());
  for (int64_t step = 1; step <= 10; ++step) {
    std::vector<float> grads(kN);
    for (float& g : grads) g = 2.0f * dist(rng);
    ASSERT_OK(opt->Apply(absl::MakeSpan(params), grads, step));
    ref.Step(ref_params, grads);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(params[i], ref_params[i],
                  kTolerance * std::max(1.0, std::fabs(ref_params[i])))
          << "step " << step << " element " << i;
      ASSERT_NEAR(opt->state()[i], ref.v[i],
                  kTolerance * std::max(1.0, std::fabs(ref.v[i])));
    }
  }
}

TEST(MomentumOptimizer, HeavyBallMatchesFp64Reference) {
  RunAgainstReference(false);
}

TEST(MomentumOptimizer, NesterovMatchesFp64Reference) {
  RunAgainstReference(true);
}

TEST(MomentumOptimizer, HoldsOneFloatOfStatePerElement) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MomentumOptimizer> opt,
                       MomentumOptimizer::Create(OptimizerOptions(), 1000));
  EXPECT_EQ(opt->StateBytes(), 1000u * 4u);
  EXPECT_EQ(opt->state().size(), 1000u);
  EXPECT_EQ(opt->name(), "momentum");
}

TEST(MomentumOptimizer, RestoredStateContinuesIdentically) {
  OptimizerOptions options;
  options.learning_rate = 0.1f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MomentumOptimizer> a,
                       MomentumOptimizer::Create(options, 3));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MomentumOptimizer> b,
                       MomentumOptimizer::Create(options, 3));
  std::vector<float> pa = {1, 2, 3};
  ASSERT_OK(a->Apply(absl::MakeSpan(pa), {1, -1, 0.5f}, 1));
  std::vector<float> pb = pa;
  ASSERT_OK(b->RestoreState(a->state()));
  ASSERT_OK(a->Apply(absl::MakeSpan(pa), {0.3f, 0.2f, 0.1f}, 2));
  ASSERT_OK(b->Apply(absl::MakeSpan(pb), {0.3f, 0.2f, 0.1f}, 2));
  EXPECT_EQ(pa, pb);
  EXPECT_THAT(b->RestoreState({1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "momentum state for 3 elements holds 3 floats, got 2"));
  EXPECT_THAT(b->RestoreState({1, NAN, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("element 1 of 3 is nan")));
}

TEST(MomentumOptimizer, NanGradientLeavesParamsAndStateUnchanged) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MomentumOptimizer> opt,
                       MomentumOptimizer::Create(OptimizerOptions(), 2));
  std::vector<float> params = {1, 1};
  ASSERT_OK(opt->Apply(absl::MakeSpan(params), {1, 1}, 1));
  const std::vector<float> params_before = params;
  const std::vector<float> state_before(opt->state().begin(),
                                        opt->state().end());
  EXPECT_THAT(opt->Apply(absl::MakeSpan(params), {1, -INFINITY}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "momentum step 2: gradient element 1 of 2 is -inf"));
  EXPECT_EQ(params, params_before);
  EXPECT_EQ(std::vector<float>(opt->state().begin(), opt->state().end()),
            state_before);
}

// A momentum that decays in a parameter whose gradient stays zero (a dead
// unit) passes through the subnormal range, where each operation costs a
// microcode assist: the optimizer takes subnormals as zero
// (server/base/flush_denormals.h), and leaves the thread's mode as it was.
TEST(MomentumOptimizer, SubnormalMomentumIsFlushedToZero) {
  OptimizerOptions options;
  options.learning_rate = 0.1f;
  options.momentum = 0.9f;
  absl::StatusOr<std::unique_ptr<MomentumOptimizer>> opt =
      MomentumOptimizer::Create(options, 3);
  ASSERT_OK(opt.status());
  const float subnormal = std::numeric_limits<float>::min() / 4;
  const float normal = std::numeric_limits<float>::min() * 4;
  ASSERT_OK((*opt)->RestoreState({subnormal, normal, -subnormal}));
  std::vector<float> params = {1.0f, 2.0f, 3.0f};
  const std::vector<float> zero(3, 0.0f);
  ASSERT_OK((*opt)->Apply(absl::MakeSpan(params), zero, 1));
  // Compared here, in the caller's mode (IEEE: a subnormal is not zero).
  const absl::Span<const float> v = (*opt)->state();
  EXPECT_EQ(std::fpclassify(v[0]), FP_ZERO);
  EXPECT_EQ(v[1], 0.9f * normal);  // normal values: IEEE as always
  EXPECT_EQ(std::fpclassify(v[2]), FP_ZERO);
  EXPECT_EQ(params, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  volatile float still = subnormal;
  EXPECT_EQ(still * 1.0f, subnormal);  // the caller's mode is back
}

}  // namespace
}  // namespace shard
}  // namespace starling
