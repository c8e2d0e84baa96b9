#include "server/metrics/metrics_registry.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/metrics/build_info.h"

namespace starling {
namespace metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(MetricsRegistry, CountersAddUpPerLabelSet) {
  MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(CounterFamily * sent,
                       registry.AddCounter("starling_node_bytes_sent_total",
                                           "Bytes sent.", {"peer"}));
  sent->WithLabels({"3"})->Increment(100);
  sent->WithLabels({"3"})->Increment(20);
  sent->WithLabels({"1"})->Increment();
  EXPECT_EQ(sent->WithLabels({"3"})->value(), 120);

  const std::vector<FamilySnapshot> families = registry.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "starling_node_bytes_sent_total");
  EXPECT_EQ(families[0].type, MetricType::kCounter);
  EXPECT_THAT(families[0].label_names, ElementsAre("peer"));
  ASSERT_EQ(families[0].series.size(), 2u);  // ordered by label values
  EXPECT_THAT(families[0].series[0].label_values, ElementsAre("1"));
  EXPECT_EQ(families[0].series[0].value, 1);
  EXPECT_THAT(families[0].series[1].label_values, ElementsAre("3"));
  EXPECT_EQ(families[0].series[1].value, 120);
}

TEST(MetricsRegistry, UnlabelledFamiliesExportZeroBeforeFirstUse) {
  MetricsRegistry registry;
  ASSERT_OK(registry.AddGauge("starling_node_group_size", "Members.").status());
  ASSERT_OK(
      registry
          .AddHistogram("starling_node_step_seconds", "Step time.", {0.1, 1})
          .status());
  const std::vector<FamilySnapshot> families = registry.Collect();
  ASSERT_EQ(families.size(), 2u);
  ASSERT_EQ(families[0].series.size(), 1u);
  EXPECT_EQ(families[0].series[0].value, 0);
  ASSERT_EQ(families[1].series.size(), 1u);
  EXPECT_THAT(families[1].series[0].histogram.cumulative_counts,
              ElementsAre(0, 0, 0));
}

TEST(MetricsRegistry, GaugesGoBothWays) {
  MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(
      GaugeFamily * size,
      registry.AddGauge("starling_node_group_size", "Members."));
  size->Get()->Set(4);
  size->Get()->Add(-1);
  EXPECT_EQ(size->Get()->value(), 3);
}

TEST(MetricsRegistry, ValidatesNamesAtRegistration) {
  MetricsRegistry registry;
  EXPECT_THAT(registry.AddCounter("starling_node_bytes_sent", "x").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must end in '_total'")));
  EXPECT_THAT(registry.AddGauge("starling_node_group_size", "x", {"bad-label"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metric starling_node_group_size")));
  EXPECT_THAT(
      registry.AddGauge("starling_node_group_size", "").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("help text")));
  EXPECT_THAT(
      registry.AddHistogram("starling_node_step_seconds", "x", {2, 1}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("increase strictly")));
  EXPECT_TRUE(registry.Collect().empty());
}

TEST(MetricsRegistry, RefusesTakenNamesIncludingHistogramSuffixes) {
  MetricsRegistry registry;
  ASSERT_OK(registry.AddGauge("starling_node_group_size", "x").status());
  EXPECT_THAT(registry.AddGauge("starling_node_group_size", "x").status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
  ASSERT_OK(
      registry.AddHistogram("starling_node_step_seconds", "x", {1}).status());
  EXPECT_THAT(registry.AddGauge("starling_node_step_seconds_sum", "x").status(),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("starling_node_step_seconds_sum")));
}

TEST(MetricsRegistryDeathTest, WrongLabelCountIsACallerBug) {
  MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(
      CounterFamily * sent,
      registry.AddCounter("starling_node_bytes_sent_total", "x", {"peer"}));
  EXPECT_DEATH(sent->WithLabels({"1", "2"}), "has labels \\{peer\\}");
}

TEST(MetricsRegistry, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(
      CounterFamily * counter,
      registry.AddCounter("starling_test_events_total", "x", {"worker"}));
  ASSERT_OK_AND_ASSIGN(
      HistogramFamily * histogram,
      registry.AddHistogram("starling_test_latency_seconds", "x", {0.5}));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        counter->WithLabels({"shared"})->Increment();
        histogram->Get()->Observe(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter->WithLabels({"shared"})->value(), kThreads * kPerThread);
  EXPECT_EQ(histogram->Get()->Snapshot().count,
            static_cast<uint64_t>(kThreads * kPerThread));
}

TEST(MetricsRegistry, CollectHooksRunBeforeEveryCollect) {
  MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(GaugeFamily * age,
                       registry.AddGauge("starling_test_age_seconds", "Age."));
  int runs = 0;
  registry.AddCollectHook([&] { age->Get()->Set(++runs * 1.5); });
  for (int scrape = 1; scrape <= 2; ++scrape) {
    const std::vector<FamilySnapshot> families = registry.Collect();
    ASSERT_EQ(families.size(), 1u);
    ASSERT_EQ(families[0].series.size(), 1u);
    EXPECT_EQ(families[0].series[0].value, scrape * 1.5);
  }
}

TEST(MetricsRegistry, BuildInfoIsOneSeriesWithProgramAndVersion) {
  MetricsRegistry registry;
  ASSERT_OK(RegisterBuildInfo(&registry, "starling-node", "1.2.3"));
  const std::vector<FamilySnapshot> families = registry.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "starling_build_info");
  EXPECT_EQ(families[0].label_names,
            (std::vector<std::string>{"program", "version"}));
  ASSERT_EQ(families[0].series.size(), 1u);
  EXPECT_EQ(families[0].series[0].label_values,
            (std::vector<std::string>{"starling-node", "1.2.3"}));
  EXPECT_EQ(families[0].series[0].value, 1);
  EXPECT_EQ(RegisterBuildInfo(&registry, "starling-node", "1.2.3").code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace metrics
}  // namespace starling
