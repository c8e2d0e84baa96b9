#include "server/shard/optimizer/easgd.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace shard {
namespace {

using ::testing::ElementsAre;
using ::testing::FloatEq;

TEST(Easgd, CenterMovesTowardTheWorker) {
  std::vector<float> center = {0, 10, -4};
  const std::vector<float> worker = {1, 6, -4};
  ASSERT_OK(ElasticCenterUpdate(absl::MakeSpan(center), worker, 0.25f));
  EXPECT_THAT(center,
              ElementsAre(FloatEq(0.25f), FloatEq(9.0f), FloatEq(-4.0f)));
  // alpha 1 copies the worker; alpha 0 changes nothing.
  ASSERT_OK(ElasticCenterUpdate(absl::MakeSpan(center), worker, 1.0f));
  EXPECT_EQ(center, worker);
  ASSERT_OK(ElasticCenterUpdate(absl::MakeSpan(center), {9, 9, 9}, 0.0f));
  EXPECT_EQ(center, worker);
}

TEST(Easgd, ExchangeConservesTheSum) {
  std::vector<float> center = {0, 8};
  std::vector<float> worker = {4, 0};
  ASSERT_OK(
      ElasticExchange(absl::MakeSpan(center), absl::MakeSpan(worker), 0.25f));
  EXPECT_THAT(center, ElementsAre(FloatEq(1.0f), FloatEq(6.0f)));
  EXPECT_THAT(worker, ElementsAre(FloatEq(3.0f), FloatEq(2.0f)));
}

TEST(Easgd, RejectsMismatchedLengthsAndBadAlpha) {
  std::vector<float> center = {1, 2};
  std::vector<float> worker = {1, 2, 3};
  EXPECT_THAT(ElasticCenterUpdate(absl::MakeSpan(center), worker, 0.5f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "elastic update: centre shard holds 2 elements, worker "
                       "parameters 3"));
  worker.pop_back();
  EXPECT_THAT(
      ElasticExchange(absl::MakeSpan(center), absl::MakeSpan(worker), 1.5f),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "elastic update: alpha 1.5 must be in [0, 1]"));
  EXPECT_THAT(ElasticCenterUpdate(absl::MakeSpan(center), worker, NAN),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(center, ElementsAre(1, 2));
}

TEST(Easgd, CenterOptimizerAddsTheSummedDifferences) {
  OptimizerOptions options;
  options.name = "easgd";
  options.learning_rate = 0.5f;  // the workers' local rate: not used here
  options.weight_decay = 0.1f;   // not used either
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ElasticCenterOptimizer> center,
                       ElasticCenterOptimizer::Create(options, 3));
  std::vector<float> x = {1, -2, 0.5f};
  ASSERT_OK(center->Apply(absl::MakeSpan(x), {0.25f, 0.5f, -0.5f}, 1));
  EXPECT_THAT(x, ElementsAre(1.25f, -1.5f, 0.0f));
  EXPECT_EQ(center->StateBytes(), 0u);
  EXPECT_THAT(center->Apply(absl::MakeSpan(x), {0, NAN, 0}, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(x, ElementsAre(1.25f, -1.5f, 0.0f));
}

TEST(Easgd, RelaxedAddAndCopy) {
  std::vector<float> center = {1, 2, 3};
  ASSERT_OK(AddRelaxed(absl::MakeSpan(center), {0.5f, -1, 0}));
  std::vector<float> out(3);
  CopyRelaxed(center, absl::MakeSpan(out));
  EXPECT_THAT(out, ElementsAre(1.5f, 1.0f, 3.0f));
  EXPECT_THAT(AddRelaxed(absl::MakeSpan(center), {1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "elastic update: centre shard holds 3 elements, the "
                       "difference 2"));
  EXPECT_THAT(AddRelaxed(absl::MakeSpan(center), {1, INFINITY, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("elastic difference element 1")));
  EXPECT_THAT(center, ElementsAre(1.5f, 1.0f, 3.0f));
}

}  // namespace
}  // namespace shard
}  // namespace starling
