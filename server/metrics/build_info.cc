#include "server/metrics/build_info.h"

#include <string>

#include "server/base/status_macros.h"

namespace starling {
namespace metrics {

absl::Status RegisterBuildInfo(MetricsRegistry* registry,
                               absl::string_view program,
                               absl::string_view version) {
  STARLING_ASSIGN_OR_RETURN(
      GaugeFamily * family,
      registry->AddGauge("starling_build_info",
                         "Always 1: the program and version this process runs",
                         {"program", "version"}));
  family->WithLabels({std::string(program), std::string(version)})->Set(1);
  return absl::OkStatus();
}

}  // namespace metrics
}  // namespace starling
