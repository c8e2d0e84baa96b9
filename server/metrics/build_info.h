// starling_build_info{program,version} = 1: which build each process runs,
// the Prometheus convention for build facts (one series, labels constant
// for the process's life), so that a dashboard can list versions per
// instance and an alert can join on them.
#ifndef STARLING_SERVER_METRICS_BUILD_INFO_H_
#define STARLING_SERVER_METRICS_BUILD_INFO_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace metrics {

// Registers starling_build_info in `registry` with one series set to 1.
// AlreadyExists if it is registered already.
absl::Status RegisterBuildInfo(MetricsRegistry* registry,
                               absl::string_view program,
                               absl::string_view version);

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_BUILD_INFO_H_
