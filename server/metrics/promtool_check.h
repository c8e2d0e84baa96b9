// Test helper: runs Prometheus' `promtool check metrics` (Debian package
// `prometheus`) on exposition text, so that tests prove /metrics output is
// what a Prometheus server and its linter accept. Testonly; thread-compatible.
#ifndef STARLING_SERVER_METRICS_PROMTOOL_CHECK_H_
#define STARLING_SERVER_METRICS_PROMTOOL_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace metrics {

// The path of an executable promtool (in $PATH or /usr/bin), or "".
std::string FindPromtool();

// OK when promtool accepts `text` without a complaint. NotFound when promtool
// is not installed (callers skip); FailedPrecondition carrying promtool's
// output when it finds problems; Internal when it cannot be run.
absl::Status CheckWithPromtool(absl::string_view text);

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_PROMTOOL_CHECK_H_
