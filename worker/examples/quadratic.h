// The quadratic the example worker trains: worker w of W minimises
//   f_w(x) = 0.5 * sum_i a_i (x_i - b_i - c_wi)^2,
// so the job minimises the mean over workers, whose optimum is
//   x*_i = b_i + mean_w c_wi.
// a_i = 1 + (i % 5) / 4, b_i = sin(0.1 i), c_wi = 0.2 (w - (W-1)/2) cos(i)
// (so mean_w c_wi = 0 in exact arithmetic). Every value is computed in
// float32 the same way in the worker and in the tests' reference.
// Stateless functions; thread-safe.
#ifndef STARLING_WORKER_EXAMPLES_QUADRATIC_H_
#define STARLING_WORKER_EXAMPLES_QUADRATIC_H_

#include <cmath>
#include <cstddef>

#include "absl/types/span.h"

namespace starling {
namespace examples {

inline float QuadraticA(size_t i) {
  return 1.0f + static_cast<float>(i % 5) / 4.0f;
}
inline float QuadraticB(size_t i) {
  return static_cast<float>(std::sin(0.1 * static_cast<double>(i)));
}
inline float QuadraticC(int worker, int workers, size_t i) {
  return static_cast<float>(0.2 * (worker - (workers - 1) / 2.0) *
                            std::cos(static_cast<double>(i)));
}

// grad = the gradient of f_worker at x.
inline void QuadraticGradient(int worker, int workers,
                              absl::Span<const float> x,
                              absl::Span<float> grad) {
  for (size_t i = 0; i < x.size(); ++i) {
    grad[i] =
        QuadraticA(i) * (x[i] - QuadraticB(i) - QuadraticC(worker, workers, i));
  }
}

// The job's loss, 0.5 * sum_i a_i (x_i - b_i)^2 (mean over workers, up to
// a constant), in double.
inline double QuadraticLoss(absl::Span<const float> x) {
  double loss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - QuadraticB(i);
    loss += 0.5 * QuadraticA(i) * d * d;
  }
  return loss;
}

}  // namespace examples
}  // namespace starling

#endif  // STARLING_WORKER_EXAMPLES_QUADRATIC_H_
