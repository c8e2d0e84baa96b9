// Histogram: one time series of observations counted into fixed buckets
// (step time, all-reduce time). Bucket i counts observations v with
// v <= upper_bounds[i] (Prometheus' `le`); an implicit last bucket (+Inf)
// counts all. Obtained from a HistogramFamily (metric_family.h); the
// registry owns it. Thread-safe.
#ifndef STARLING_SERVER_METRICS_HISTOGRAM_H_
#define STARLING_SERVER_METRICS_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace starling {
namespace metrics {

// A consistent copy of a histogram's state.
struct HistogramData {
  // Finite, strictly increasing; +Inf is implicit.
  std::vector<double> upper_bounds;
  // cumulative_counts[i]: observations <= upper_bounds[i]; one more entry
  // at the end for +Inf, equal to `count`.
  std::vector<uint64_t> cumulative_counts;
  double sum = 0;
  uint64_t count = 0;
};

class Histogram {
 public:
  // REQUIRES: ValidateBucketBounds(upper_bounds).ok() (the registry checks
  // it when the family is registered).
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` into its bucket. NaN is counted in +Inf only and makes
  // the sum NaN, as Prometheus' own clients do.
  void Observe(double value);

  HistogramData Snapshot() const;

  // OK, or InvalidArgument if `upper_bounds` is empty, holds a NaN or an
  // infinity, or is not strictly increasing.
  static absl::Status ValidateBucketBounds(
      const std::vector<double>& upper_bounds);

  // `count` bounds start, start*factor, start*factor^2, ... (for times and
  // sizes). REQUIRES: start > 0, factor > 1, count >= 1.
  static std::vector<double> ExponentialBounds(double start, double factor,
                                               int count);

 private:
  const std::vector<double> upper_bounds_;
  mutable absl::Mutex mu_;
  // Per bucket, not cumulative; size upper_bounds_.size() + 1 (last: +Inf).
  std::vector<uint64_t> bucket_counts_ ABSL_GUARDED_BY(mu_);
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_HISTOGRAM_H_
