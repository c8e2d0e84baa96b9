#include "server/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      bucket_counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // First bound >= value; NaN compares false everywhere and lands in +Inf.
  size_t bucket = upper_bounds_.size();
  if (!std::isnan(value)) {
    bucket = static_cast<size_t>(
        std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) -
        upper_bounds_.begin());
  }
  absl::MutexLock lock(&mu_);
  ++bucket_counts_[bucket];
  sum_ += value;
  ++count_;
}

HistogramData Histogram::Snapshot() const {
  HistogramData data;
  data.upper_bounds = upper_bounds_;
  absl::MutexLock lock(&mu_);
  data.cumulative_counts.reserve(bucket_counts_.size());
  uint64_t running = 0;
  for (uint64_t n : bucket_counts_) {
    running += n;
    data.cumulative_counts.push_back(running);
  }
  data.sum = sum_;
  data.count = count_;
  return data;
}

absl::Status Histogram::ValidateBucketBounds(
    const std::vector<double>& upper_bounds) {
  if (upper_bounds.empty()) {
    return absl::InvalidArgumentError(
        "histogram needs at least one finite bucket bound");
  }
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bound ", i, " is ", upper_bounds[i],
                       ": bounds must be finite (+Inf is implicit)"));
    }
    if (i > 0 && upper_bounds[i] <= upper_bounds[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram bucket bounds must increase strictly: bound ",
                       i, " (", upper_bounds[i], ") <= bound ", i - 1, " (",
                       upper_bounds[i - 1], ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<double> Histogram::ExponentialBounds(double start, double factor,
                                                 int count) {
  STARLING_CHECK(start > 0 && factor > 1 && count >= 1)
      << "start " << start << " factor " << factor << " count " << count;
  std::vector<double> bounds;
  bounds.reserve(count);
  double bound = start;
  for (int i = 0; i < count; ++i) {
    bounds.push_back(bound);
    bound *= factor;
  }
  return bounds;
}

}  // namespace metrics
}  // namespace starling
