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

}  // namespace
}  // namespace shard
}  // namespace starling
