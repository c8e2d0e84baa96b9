#include "server/metrics/text_format.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/metrics/metrics_registry.h"
#include "server/metrics/promtool_check.h"

namespace starling {
namespace metrics {
namespace {

// One family of each type, with labels that need escaping.
void FillSampleRegistry(MetricsRegistry* registry) {
  CounterFamily* sent =
      registry
          ->AddCounter("starling_node_bytes_sent_total",
                       "Bytes sent on the data plane, per peer.", {"peer"})
          .value();
  sent->WithLabels({"3"})->Increment(1024);
  sent->WithLabels({"host \"b\"\\x\ny"})->Increment(1);
  GaugeFamily* loss =
      registry
          ->AddGauge("starling_coordinator_loss",
                     "Last loss reported.\nBackslash \\ kept.", {"rank"})
          .value();
  loss->WithLabels({"0"})->Set(0.1);
  loss->WithLabels({"1"})->Set(std::nan(""));
  HistogramFamily* step =
      registry
          ->AddHistogram("starling_coordinator_step_duration_seconds",
                         "Step time.", {0.01, 0.1, 1}, {"rank"})
          .value();
  step->WithLabels({"0"})->Observe(0.05);
  step->WithLabels({"0"})->Observe(0.5);
  step->WithLabels({"0"})->Observe(3);
  registry
      ->AddCounter("starling_coordinator_node_failures_total",
                   "Nodes marked lost.")
      .value()
      ->Get()
      ->Increment();
}

TEST(TextFormat, EncodesEveryTypeInVersion004) {
  MetricsRegistry registry;
  FillSampleRegistry(&registry);
  EXPECT_EQ(
      EncodeTextFormat(registry.Collect()),
      R"(# HELP starling_coordinator_loss Last loss reported.\nBackslash \\ kept.
# TYPE starling_coordinator_loss gauge
starling_coordinator_loss{rank="0"} 0.1
starling_coordinator_loss{rank="1"} NaN
# HELP starling_coordinator_node_failures_total Nodes marked lost.
# TYPE starling_coordinator_node_failures_total counter
starling_coordinator_node_failures_total 1
# HELP starling_coordinator_step_duration_seconds Step time.
# TYPE starling_coordinator_step_duration_seconds histogram
starling_coordinator_step_duration_seconds_bucket{rank="0",le="0.01"} 0
starling_coordinator_step_duration_seconds_bucket{rank="0",le="0.1"} 1
starling_coordinator_step_duration_seconds_bucket{rank="0",le="1"} 2
starling_coordinator_step_duration_seconds_bucket{rank="0",le="+Inf"} 3
starling_coordinator_step_duration_seconds_sum{rank="0"} 3.55
starling_coordinator_step_duration_seconds_count{rank="0"} 3
# HELP starling_node_bytes_sent_total Bytes sent on the data plane, per peer.
# TYPE starling_node_bytes_sent_total counter
starling_node_bytes_sent_total{peer="3"} 1024
starling_node_bytes_sent_total{peer="host \"b\"\\x\ny"} 1
)");
}

TEST(TextFormat, EscapesHelpAndLabelValues) {
  EXPECT_EQ(EscapeHelpText("a\\b\nc\"d"), "a\\\\b\\nc\"d");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
}

TEST(TextFormat, FormatsValuesShortestAndSpecials) {
  EXPECT_EQ(FormatSampleValue(0), "0");
  EXPECT_EQ(FormatSampleValue(3), "3");
  EXPECT_EQ(FormatSampleValue(0.1), "0.1");
  EXPECT_EQ(FormatSampleValue(-2.5e-9), "-2.5e-09");
  EXPECT_EQ(FormatSampleValue(1e21), "1e+21");
  EXPECT_EQ(FormatSampleValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()),
            "-Inf");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
}

TEST(TextFormat, EmptyRegistryIsEmptyText) {
  EXPECT_EQ(EncodeTextFormat({}), "");
}

TEST(TextFormat, PassesPromtoolCheckMetrics) {
  MetricsRegistry registry;
  FillSampleRegistry(&registry);
  const absl::Status status =
      CheckWithPromtool(EncodeTextFormat(registry.Collect()));
  if (absl::IsNotFound(status)) {
    GTEST_SKIP() << "skipping the promtool check: " << status.message();
  }
  EXPECT_OK(status);
}

TEST(TextFormat, PromtoolCheckCatchesBadText) {
  // Proves the check above can fail: a counter without _total is linted.
  const absl::Status status = CheckWithPromtool(
      "# HELP starling_x_bytes x\n# TYPE starling_x_bytes counter\n"
      "starling_x_bytes 1\n");
  if (absl::IsNotFound(status)) {
    GTEST_SKIP() << "skipping the promtool check: " << status.message();
  }
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               testing::HasSubstr("_total")));
}

}  // namespace
}  // namespace metrics
}  // namespace starling
