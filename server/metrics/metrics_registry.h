// MetricsRegistry: the metrics one process exports. Created in main.cc (or a
// test) and passed by pointer to every component that registers metrics:
// there is no global registry.
//
//   metrics::MetricsRegistry registry;
//   STARLING_ASSIGN_OR_RETURN(
//       metrics::CounterFamily* sent,
//       registry.AddCounter("starling_node_bytes_sent_total",
//                           "Bytes sent on the data plane, per peer rank.",
//                           {"peer"}));
//   sent->WithLabels({"3"})->Increment(n);
//
// Names are validated at registration (metric_name.h); the families live as
// long as the registry. Thread-safe.
#ifndef STARLING_SERVER_METRICS_METRICS_REGISTRY_H_
#define STARLING_SERVER_METRICS_METRICS_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metric_family.h"
#include "server/metrics/metric_snapshot.h"

namespace starling {
namespace metrics {

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Each registers a family and returns it (owned by the registry). `help`
  // is any one-line text (escaped on export) and must not be empty. A family
  // without labels gets its one series at once, so it is exported as 0
  // before first use. Errors: InvalidArgument for a bad metric or label
  // name, empty help, or bad bucket bounds (histograms); AlreadyExists when
  // the name, or a sample name it implies (a histogram's _bucket, _sum,
  // _count), is taken.
  absl::StatusOr<CounterFamily*> AddCounter(
      absl::string_view name, absl::string_view help,
      std::vector<std::string> label_names = {});
  absl::StatusOr<GaugeFamily*> AddGauge(
      absl::string_view name, absl::string_view help,
      std::vector<std::string> label_names = {});
  absl::StatusOr<HistogramFamily*> AddHistogram(
      absl::string_view name, absl::string_view help,
      std::vector<double> upper_bounds,
      std::vector<std::string> label_names = {});

  // Adds a hook that Collect() runs first, every time, to bring values
  // only their owner can compute up to date (the age of a running
  // operation, sums kept elsewhere). Hooks run on the collecting thread,
  // without the registry's lock held, in the order added; they must not
  // block. `hook` must stay callable as long as the registry collects.
  void AddCollectHook(std::function<void()> hook);

  // A copy of every family and series, families ordered by name (after the
  // collect hooks ran).
  std::vector<FamilySnapshot> Collect() const;

 private:
  struct Entry {
    MetricType type;
    std::unique_ptr<CounterFamily> counter;
    std::unique_ptr<GaugeFamily> gauge;
    std::unique_ptr<HistogramFamily> histogram;
  };

  // Validates and reserves `name` (and the sample names it implies).
  absl::Status ReserveLocked(absl::string_view name, absl::string_view help,
                             MetricType type,
                             const std::vector<std::string>& label_names)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> families_ ABSL_GUARDED_BY(mu_);
  // Every sample name in use: family names plus histogram suffixes.
  std::set<std::string> sample_names_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex hooks_mu_;
  std::vector<std::function<void()>> hooks_ ABSL_GUARDED_BY(hooks_mu_);
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRICS_REGISTRY_H_
