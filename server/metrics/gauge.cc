#include "server/metrics/gauge.h"

namespace starling {
namespace metrics {

void Gauge::Set(double value) {
  value_.store(value, std::memory_order_relaxed);
}

void Gauge::Add(double delta) {
  // std::atomic<double> has no fetch_add before C++20: compare-and-swap.
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + delta,
                                       std::memory_order_relaxed)) {
  }
}

double Gauge::value() const { return value_.load(std::memory_order_relaxed); }

}  // namespace metrics
}  // namespace starling
