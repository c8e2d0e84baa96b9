// Rules for metric and label names, checked when a metric is registered.
//
// Metric names follow Prometheus' grammar ([a-zA-Z_:][a-zA-Z0-9_:]*) and
// Starling's convention `starling_<subsystem>_<what>_<unit>` (STYLE.md §2):
//   - lower-case snake_case: [a-z0-9_], starting with "starling_", at least
//     three non-empty words (starling, a subsystem, what is measured);
//   - no colons (reserved for recording rules), no "__";
//   - counters end in "_total", other types do not;
//   - histograms do not end in "_bucket", "_sum" or "_count" (the encoder
//     adds those).
// Label names follow [a-zA-Z_][a-zA-Z0-9_]*, must not start with "__"
// (reserved by Prometheus) and must not repeat; "le" (histogram buckets) and
// "quantile" (summaries) are reserved.
// Stateless functions; thread-safe.
#ifndef STARLING_SERVER_METRICS_METRIC_NAME_H_
#define STARLING_SERVER_METRICS_METRIC_NAME_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/metrics/metric_type.h"

namespace starling {
namespace metrics {

// OK, or InvalidArgument naming the rule `name` breaks.
absl::Status ValidateMetricName(absl::string_view name, MetricType type);

// OK, or InvalidArgument naming the offending label and the rule it breaks.
absl::Status ValidateLabelNames(const std::vector<std::string>& label_names);

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRIC_NAME_H_
