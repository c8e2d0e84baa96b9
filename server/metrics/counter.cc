#include "server/metrics/counter.h"

#include <cmath>

#include "server/base/logging.h"

namespace starling {
namespace metrics {

void Counter::Increment(double delta) {
  STARLING_CHECK(delta >= 0 && std::isfinite(delta))
      << "counter increment must be finite and >= 0, got " << delta;
  // std::atomic<double> has no fetch_add before C++20: compare-and-swap.
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + delta,
                                       std::memory_order_relaxed)) {
  }
}

double Counter::value() const { return value_.load(std::memory_order_relaxed); }

}  // namespace metrics
}  // namespace starling
