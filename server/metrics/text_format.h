// The Prometheus text exposition format, version 0.0.4: what /metrics serves.
//
//   # HELP starling_coordinator_node_failures_total Nodes marked lost.
//   # TYPE starling_coordinator_node_failures_total counter
//   starling_coordinator_node_failures_total 1
//   # HELP starling_coordinator_step_duration_seconds Step time per rank.
//   # TYPE starling_coordinator_step_duration_seconds histogram
//   starling_coordinator_step_duration_seconds_bucket{rank="0",le="0.1"} 3
//   ...
//   starling_coordinator_step_duration_seconds_bucket{rank="0",le="+Inf"} 4
//   starling_coordinator_step_duration_seconds_sum{rank="0"} 0.52
//   starling_coordinator_step_duration_seconds_count{rank="0"} 4
//
// Escaping: in HELP text `\` and newline become `\\` and `\n`; in label
// values `\`, `"` and newline become `\\`, `\"` and `\n`. Values are
// shortest round-trip decimals, or NaN, +Inf, -Inf. No timestamps. Every
// line ends in '\n'. Stateless functions; thread-safe.
#ifndef STARLING_SERVER_METRICS_TEXT_FORMAT_H_
#define STARLING_SERVER_METRICS_TEXT_FORMAT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/metrics/metric_snapshot.h"

namespace starling {
namespace metrics {

// The Content-Type header for EncodeTextFormat()'s output.
inline constexpr char kTextFormatContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

// Writes `families` in order.
std::string EncodeTextFormat(const std::vector<FamilySnapshot>& families);

// The pieces, exposed for tests.
std::string EscapeHelpText(absl::string_view help);
std::string EscapeLabelValue(absl::string_view value);
std::string FormatSampleValue(double value);

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_TEXT_FORMAT_H_
