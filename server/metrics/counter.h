// Counter: one time series that only goes up (bytes sent, failures seen).
// Obtained from a CounterFamily (metric_family.h) for one set of label
// values; the registry owns it. Thread-safe and lock-free.
#ifndef STARLING_SERVER_METRICS_COUNTER_H_
#define STARLING_SERVER_METRICS_COUNTER_H_

#include <atomic>

namespace starling {
namespace metrics {

class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `delta`. REQUIRES: delta >= 0 and finite (a counter never goes
  // down; violating this is a bug in the caller and aborts).
  void Increment(double delta = 1.0);

  double value() const;

 private:
  // Relaxed: a counter orders nothing; readers only need some recent value.
  std::atomic<double> value_{0.0};
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_COUNTER_H_
