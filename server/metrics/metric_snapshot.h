// A point-in-time copy of metrics, as MetricsRegistry::Collect() takes it
// and the text encoder (text_format.h) writes it. Plain data.
#ifndef STARLING_SERVER_METRICS_METRIC_SNAPSHOT_H_
#define STARLING_SERVER_METRICS_METRIC_SNAPSHOT_H_

#include <string>
#include <vector>

#include "server/metrics/histogram.h"
#include "server/metrics/metric_type.h"

namespace starling {
namespace metrics {

struct SeriesSnapshot {
  // In the order of FamilySnapshot::label_names.
  std::vector<std::string> label_values;
  // Counters and gauges.
  double value = 0;
  // Histograms.
  HistogramData histogram;
};

struct FamilySnapshot {
  std::string name;
  std::string help;
  MetricType type = MetricType::kGauge;
  std::vector<std::string> label_names;
  std::vector<SeriesSnapshot> series;
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRIC_SNAPSHOT_H_
