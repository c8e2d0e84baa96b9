#include "server/shard/optimizer/sgd.h"

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

using ::testing::HasSubstr;

// fp32 results must match the fp64 reference to within
// kTolerance * max(1, |reference|).
constexpr double kTolerance = 1e-5;

// Independent fp64 SGD: p -= lr * (scale * g + wd * p).
void ReferenceSgd(std::vector<double>& p, const std::vector<float>& g,
                  double lr, double scale, double wd) {
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] -= lr * (scale * g[i] + wd * p[i]);
  }
}

TEST(SgdOptimizer, MatchesFp64ReferenceOverSeveralSteps) {
  constexpr size_t kN = 1031;  // not a multiple of any vector width
  OptimizerOptions options;
  options.learning_rate = 0.1f;
  options.weight_decay = 0.01f;
  options.gradient_scale = 0.25f;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(options, kN));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> params(kN);
  for (float& p : params) p = dist(rng);
  std::vector<double> ref(params.begin(), params.end());
  for (int64_t step = 1; step <= 8; ++step) {
    std::vector<float> grads(kN);
    for (float& g : grads) g = 4.0f * dist(rng);
    ASSERT_OK(sgd->Apply(absl::MakeSpan(params), grads, step));
    ReferenceSgd(ref, grads, 0.1, 0.25, 0.01);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(params[i], ref[i],
                  kTolerance * std::max(1.0, std::fabs(ref[i])))
          << "step " << step << " element " << i;
    }
  }
  EXPECT_EQ(sgd->StateBytes(), 0u);
  EXPECT_TRUE(sgd->state().empty());
  EXPECT_EQ(sgd->name(), "sgd");
}

TEST(SgdOptimizer, RejectsWrongLengthsAndSteps) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(OptimizerOptions(), 4));
  std::vector<float> params(4, 1.0f), grads(4, 1.0f), short_grads(3, 1.0f);
  std::vector<float> long_params(5, 1.0f);
  EXPECT_THAT(sgd->Apply(absl::MakeSpan(params), short_grads, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "sgd step 1: params hold 4 elements and grads 3; the "
                       "optimizer was created for a shard of 4"));
  EXPECT_THAT(sgd->Apply(absl::MakeSpan(long_params), grads, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params hold 5 elements")));
  EXPECT_THAT(sgd->Apply(absl::MakeSpan(params), grads, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "sgd step 0: steps count from 1"));
  for (float p : params) EXPECT_EQ(p, 1.0f);
}

TEST(SgdOptimizer, RejectsNonFiniteGradientsWithoutTouchingParams) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(OptimizerOptions(), 4));
  std::vector<float> params(4, 1.0f);
  const std::vector<float> grads = {0.5f, 0.5f, NAN, INFINITY};
  EXPECT_THAT(sgd->Apply(absl::MakeSpan(params), grads, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "sgd step 3: gradient element 2 of 4 is nan"));
  for (float p : params) EXPECT_EQ(p, 1.0f);
}

TEST(SgdOptimizer, CheckFiniteOffLetsNanThrough) {
  OptimizerOptions options;
  options.check_finite = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(options, 2));
  std::vector<float> params(2, 1.0f);
  ASSERT_OK(sgd->Apply(absl::MakeSpan(params), {NAN, 1.0f}, 1));
  EXPECT_TRUE(std::isnan(params[0]));
  EXPECT_FLOAT_EQ(params[1], 1.0f - 0.01f);
}

TEST(SgdOptimizer, LearningRateAndScaleChangeBetweenSteps) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(OptimizerOptions(), 1));
  std::vector<float> params = {0.0f};
  ASSERT_OK(sgd->SetLearningRate(0.5f));
  ASSERT_OK(sgd->SetGradientScale(0.5f));
  ASSERT_OK(sgd->Apply(absl::MakeSpan(params), {2.0f}, 1));
  EXPECT_FLOAT_EQ(params[0], -0.5f);
  EXPECT_THAT(sgd->SetLearningRate(-1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("learning_rate = -1")));
  EXPECT_THAT(sgd->SetGradientScale(0.0f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gradient_scale = 0")));
  EXPECT_FLOAT_EQ(sgd->options().learning_rate, 0.5f);
  EXPECT_FLOAT_EQ(sgd->options().gradient_scale, 0.5f);
}

TEST(SgdOptimizer, EmptyShardIsValid) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SgdOptimizer> sgd,
                       SgdOptimizer::Create(OptimizerOptions(), 0));
  EXPECT_OK(sgd->Apply({}, {}, 1));
}

}  // namespace
}  // namespace shard
}  // namespace starling
