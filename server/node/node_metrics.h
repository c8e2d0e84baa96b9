// NodeMetrics: the node daemon's Prometheus series (DESIGN.md
// "Observability"), registered once in the daemon's registry. The pointers
// are owned by the registry; the series are thread-safe.
#ifndef STARLING_SERVER_NODE_NODE_METRICS_H_
#define STARLING_SERVER_NODE_NODE_METRICS_H_

#include "absl/status/statusor.h"
#include "server/metrics/counter.h"
#include "server/metrics/gauge.h"
#include "server/metrics/histogram.h"
#include "server/metrics/metric_family.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace node {

struct NodeMetrics {
  // AlreadyExists if `registry` holds them already.
  static absl::StatusOr<NodeMetrics> Register(
      metrics::MetricsRegistry* registry);

  metrics::Histogram* step_seconds = nullptr;
  // Reduce-scatter + all-gather of a step, and plain all-reduces.
  metrics::Histogram* allreduce_seconds = nullptr;
  metrics::Counter* collective_bytes = nullptr;
  metrics::Counter* steps = nullptr;
  metrics::Counter* step_failures = nullptr;
  metrics::Counter* pushes = nullptr;
  metrics::Counter* pulls = nullptr;
  metrics::Histogram* push_seconds = nullptr;
  metrics::Histogram* pull_seconds = nullptr;
  metrics::Gauge* attached_workers = nullptr;
  metrics::Gauge* optimizer_state_bytes = nullptr;
  metrics::Gauge* shard_bytes = nullptr;
  metrics::Gauge* group_size = nullptr;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_NODE_METRICS_H_
