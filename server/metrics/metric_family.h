// MetricFamily<Series>: all time series of one metric name, one per set of
// label values, e.g. starling_node_bytes_sent_total{peer="3"}.
//
//   CounterFamily* sent = ...;                  // from MetricsRegistry
//   sent->WithLabels({"3"})->Increment(bytes);  // series for peer="3"
//   failures->Get()->Increment();               // a family without labels
//
// A series is created (at zero) the first time its label values are asked
// for and lives as long as the family, i.e. as long as the MetricsRegistry
// that owns it: callers may keep the pointer and skip the lookup on hot
// paths. Thread-safe.
#ifndef STARLING_SERVER_METRICS_METRIC_FAMILY_H_
#define STARLING_SERVER_METRICS_METRIC_FAMILY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "server/base/logging.h"
#include "server/metrics/counter.h"
#include "server/metrics/gauge.h"
#include "server/metrics/histogram.h"

namespace starling {
namespace metrics {

template <typename Series>
class MetricFamily {
 public:
  using Factory = std::function<std::unique_ptr<Series>()>;

  // Use MetricsRegistry::Add*() (it validates names); `factory` makes a
  // fresh series.
  MetricFamily(std::string name, std::string help,
               std::vector<std::string> label_names, Factory factory)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        factory_(std::move(factory)) {}
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // The series for `label_values` (in the order of label_names()); any
  // string is a valid value. REQUIRES: label_values.size() ==
  // label_names().size() (the label set is fixed at registration: a wrong
  // count is a bug in the caller and aborts).
  Series* WithLabels(const std::vector<std::string>& label_values) {
    STARLING_CHECK(label_values.size() == label_names_.size())
        << name_ << " has labels {" << absl::StrJoin(label_names_, ",")
        << "}, got " << label_values.size() << " value(s)";
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Series>& series = series_[label_values];
    if (series == nullptr) series = factory_();
    return series.get();
  }

  // The only series of a family without labels.
  Series* Get() { return WithLabels({}); }

  // Calls fn(label_values, series) for every series, ordered by label
  // values. `fn` runs under the family's lock: it must not call back into
  // this family.
  void ForEachSeries(const std::function<void(const std::vector<std::string>&,
                                              const Series&)>& fn) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, series] : series_) fn(values, *series);
  }

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const Factory factory_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Series>> series_
      ABSL_GUARDED_BY(mu_);
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRIC_FAMILY_H_
