// MetricType: the three kinds of metric Starling exports, and their names in
// the Prometheus text format ("counter", "gauge", "histogram").
#ifndef STARLING_SERVER_METRICS_METRIC_TYPE_H_
#define STARLING_SERVER_METRICS_METRIC_TYPE_H_

#include "absl/strings/string_view.h"

namespace starling {
namespace metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge" or "histogram": the word on a `# TYPE` line.
inline absl::string_view MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRIC_TYPE_H_
