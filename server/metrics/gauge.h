// Gauge: one time series that goes up and down (group size, last loss).
// Obtained from a GaugeFamily (metric_family.h) for one set of label values;
// the registry owns it. Thread-safe and lock-free.
#ifndef STARLING_SERVER_METRICS_GAUGE_H_
#define STARLING_SERVER_METRICS_GAUGE_H_

#include <atomic>

namespace starling {
namespace metrics {

class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  // Any value, NaN and infinities included (exported as NaN, +Inf, -Inf).
  void Set(double value);
  void Add(double delta);

  double value() const;

 private:
  // Relaxed: a gauge orders nothing; readers only need some recent value.
  std::atomic<double> value_{0.0};
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_GAUGE_H_
