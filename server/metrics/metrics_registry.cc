#include "server/metrics/metrics_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/metrics/metric_name.h"

namespace starling {
namespace metrics {
namespace {

std::vector<std::string> SampleNames(absl::string_view name, MetricType type) {
  std::vector<std::string> names = {std::string(name)};
  if (type == MetricType::kHistogram) {
    for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
      names.push_back(absl::StrCat(name, suffix));
    }
  }
  return names;
}

template <typename Series>
void CollectScalars(const MetricFamily<Series>& family,
                    FamilySnapshot* snapshot) {
  family.ForEachSeries(
      [snapshot](const std::vector<std::string>& values, const Series& s) {
        SeriesSnapshot series;
        series.label_values = values;
        series.value = s.value();
        snapshot->series.push_back(std::move(series));
      });
}

}  // namespace

absl::Status MetricsRegistry::ReserveLocked(
    absl::string_view name, absl::string_view help, MetricType type,
    const std::vector<std::string>& label_names) {
  STARLING_RETURN_IF_ERROR(ValidateMetricName(name, type));
  STARLING_RETURN_IF_ERROR(
      Annotate(ValidateLabelNames(label_names), absl::StrCat("metric ", name)));
  if (help.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric ", name, " needs a help text"));
  }
  const std::vector<std::string> samples = SampleNames(name, type);
  for (const std::string& sample : samples) {
    if (sample_names_.count(sample) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "metric ", name, ": sample name ", sample, " is already registered"));
    }
  }
  sample_names_.insert(samples.begin(), samples.end());
  return absl::OkStatus();
}

absl::StatusOr<CounterFamily*> MetricsRegistry::AddCounter(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(
      ReserveLocked(name, help, MetricType::kCounter, label_names));
  const bool unlabelled = label_names.empty();
  Entry& entry = families_[std::string(name)];
  entry.type = MetricType::kCounter;
  entry.counter = std::make_unique<CounterFamily>(
      std::string(name), std::string(help), std::move(label_names),
      [] { return std::make_unique<Counter>(); });
  if (unlabelled) entry.counter->Get();
  return entry.counter.get();
}

absl::StatusOr<GaugeFamily*> MetricsRegistry::AddGauge(
    absl::string_view name, absl::string_view help,
    std::vector<std::string> label_names) {
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(
      ReserveLocked(name, help, MetricType::kGauge, label_names));
  const bool unlabelled = label_names.empty();
  Entry& entry = families_[std::string(name)];
  entry.type = MetricType::kGauge;
  entry.gauge = std::make_unique<GaugeFamily>(
      std::string(name), std::string(help), std::move(label_names),
      [] { return std::make_unique<Gauge>(); });
  if (unlabelled) entry.gauge->Get();
  return entry.gauge.get();
}

absl::StatusOr<HistogramFamily*> MetricsRegistry::AddHistogram(
    absl::string_view name, absl::string_view help,
    std::vector<double> upper_bounds, std::vector<std::string> label_names) {
  STARLING_RETURN_IF_ERROR(
      Annotate(Histogram::ValidateBucketBounds(upper_bounds),
               absl::StrCat("metric ", name)));
  absl::MutexLock lock(&mu_);
  STARLING_RETURN_IF_ERROR(
      ReserveLocked(name, help, MetricType::kHistogram, label_names));
  const bool unlabelled = label_names.empty();
  Entry& entry = families_[std::string(name)];
  entry.type = MetricType::kHistogram;
  entry.histogram = std::make_unique<HistogramFamily>(
      std::string(name), std::string(help), std::move(label_names),
      [bounds = std::move(upper_bounds)] {
        return std::make_unique<Histogram>(bounds);
      });
  if (unlabelled) entry.histogram->Get();
  return entry.histogram.get();
}

void MetricsRegistry::AddCollectHook(std::function<void()> hook) {
  absl::MutexLock lock(&hooks_mu_);
  hooks_.push_back(std::move(hook));
}

std::vector<FamilySnapshot> MetricsRegistry::Collect() const {
  {
    // Held across the hooks so that two scrapes run them one at a time;
    // hooks only set metrics, which take their own locks.
    absl::MutexLock lock(&hooks_mu_);
    for (const std::function<void()>& hook : hooks_) hook();
  }
  std::vector<FamilySnapshot> out;
  absl::MutexLock lock(&mu_);
  out.reserve(families_.size());
  for (const auto& [name, entry] : families_) {
    FamilySnapshot family;
    family.name = name;
    family.type = entry.type;
    switch (entry.type) {
      case MetricType::kCounter:
        family.help = entry.counter->help();
        family.label_names = entry.counter->label_names();
        CollectScalars(*entry.counter, &family);
        break;
      case MetricType::kGauge:
        family.help = entry.gauge->help();
        family.label_names = entry.gauge->label_names();
        CollectScalars(*entry.gauge, &family);
        break;
      case MetricType::kHistogram:
        family.help = entry.histogram->help();
        family.label_names = entry.histogram->label_names();
        entry.histogram->ForEachSeries(
            [&family](const std::vector<std::string>& values,
                      const Histogram& h) {
              SeriesSnapshot series;
              series.label_values = values;
              series.histogram = h.Snapshot();
              family.series.push_back(std::move(series));
            });
        break;
    }
    out.push_back(std::move(family));
  }
  return out;
}

}  // namespace metrics
}  // namespace starling
