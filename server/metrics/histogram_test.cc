#include "server/metrics/histogram.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace metrics {
namespace {

using ::testing::ElementsAre;

TEST(Histogram, CountsEachObservationIntoTheFirstBucketAtOrAboveIt) {
  Histogram histogram({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 7.0, 100.0}) histogram.Observe(v);
  const HistogramData data = histogram.Snapshot();
  EXPECT_THAT(data.upper_bounds, ElementsAre(0.1, 1, 10));
  // le="0.1": 0.05 and 0.1 (bounds are inclusive); le="+Inf": all six.
  EXPECT_THAT(data.cumulative_counts, ElementsAre(2, 4, 5, 6));
  EXPECT_EQ(data.count, 6u);
  EXPECT_DOUBLE_EQ(data.sum, 108.65);
}

TEST(Histogram, NaNLandsInInfOnly) {
  Histogram histogram({1});
  histogram.Observe(std::nan(""));
  const HistogramData data = histogram.Snapshot();
  EXPECT_THAT(data.cumulative_counts, ElementsAre(0, 1));
  EXPECT_TRUE(std::isnan(data.sum));
}

TEST(Histogram, ValidatesBucketBounds) {
  EXPECT_OK(Histogram::ValidateBucketBounds({-1, 0, 2.5}));
  EXPECT_THAT(Histogram::ValidateBucketBounds({}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Histogram::ValidateBucketBounds({1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       testing::HasSubstr("increase strictly")));
  EXPECT_THAT(Histogram::ValidateBucketBounds(
                  {1, std::numeric_limits<double>::infinity()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       testing::HasSubstr("+Inf is implicit")));
}

TEST(Histogram, ExponentialBounds) {
  EXPECT_THAT(Histogram::ExponentialBounds(0.001, 10, 4),
              ElementsAre(0.001, 0.01, 0.1, testing::DoubleEq(1.0)));
}

}  // namespace
}  // namespace metrics
}  // namespace starling
