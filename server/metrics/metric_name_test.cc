#include "server/metrics/metric_name.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricName, AcceptsStarlingConventionNames) {
  EXPECT_OK(ValidateMetricName("starling_coordinator_node_failures_total",
                               MetricType::kCounter));
  EXPECT_OK(ValidateMetricName("starling_coordinator_group_size",
                               MetricType::kGauge));
  EXPECT_OK(ValidateMetricName("starling_node_allreduce_seconds",
                               MetricType::kHistogram));
}

TEST(MetricName, RefusesNamesOutsideTheConvention) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ValidateMetricName("node_failures_total", MetricType::kCounter),
              StatusIs(kInvalid, HasSubstr("must start with 'starling_'")));
  EXPECT_THAT(ValidateMetricName("starling_Node_size", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("character 'N'")));
  EXPECT_THAT(ValidateMetricName("starling_node:size", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("character ':'")));
  EXPECT_THAT(ValidateMetricName("starling_node-size", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("character '-'")));
  EXPECT_THAT(ValidateMetricName("starling_node__size", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("'__'")));
  EXPECT_THAT(ValidateMetricName("starling_node_", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("ends with '_'")));
  EXPECT_THAT(ValidateMetricName("starling_node", MetricType::kGauge),
              StatusIs(kInvalid, HasSubstr("subsystem")));
}

TEST(MetricName, CountersAndOnlyCountersEndInTotal) {
  EXPECT_THAT(
      ValidateMetricName("starling_node_bytes_sent", MetricType::kCounter),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("must end in '_total'")));
  EXPECT_THAT(
      ValidateMetricName("starling_node_bytes_total", MetricType::kGauge),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("only counters end in '_total'")));
}

TEST(MetricName, HistogramsDoNotEndInGeneratedSuffixes) {
  EXPECT_THAT(
      ValidateMetricName("starling_node_step_count", MetricType::kHistogram),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'_count'")));
  EXPECT_THAT(
      ValidateMetricName("starling_node_step_bucket", MetricType::kHistogram),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'_bucket'")));
}

TEST(LabelNames, AcceptsPrometheusLabelNames) {
  EXPECT_OK(ValidateLabelNames({}));
  EXPECT_OK(ValidateLabelNames({"peer", "algorithm", "_size_bucket2"}));
}

TEST(LabelNames, RefusesBadReservedAndRepeatedNames) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_THAT(ValidateLabelNames({""}), StatusIs(kInvalid));
  EXPECT_THAT(ValidateLabelNames({"3peer"}),
              StatusIs(kInvalid, HasSubstr("'3peer'")));
  EXPECT_THAT(ValidateLabelNames({"peer-rank"}),
              StatusIs(kInvalid, HasSubstr("character '-'")));
  EXPECT_THAT(ValidateLabelNames({"__name__"}),
              StatusIs(kInvalid, HasSubstr("reserved by Prometheus")));
  EXPECT_THAT(ValidateLabelNames({"le"}), StatusIs(kInvalid, HasSubstr("le")));
  EXPECT_THAT(ValidateLabelNames({"quantile"}), StatusIs(kInvalid));
  EXPECT_THAT(ValidateLabelNames({"peer", "peer"}),
              StatusIs(kInvalid, HasSubstr("appears twice")));
}

}  // namespace
}  // namespace metrics
}  // namespace starling
