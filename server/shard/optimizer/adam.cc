#include "server/shard/optimizer/adam.h"

#include <cmath>

#include "server/base/flush_denormals.h"
#include "server/base/status_macros.h"

namespace starling {
namespace shard {

absl::StatusOr<std::unique_ptr<AdamOptimizer>> AdamOptimizer::Create(
    const OptimizerOptions& options, size_t shard_elements) {
  STARLING_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  return std::unique_ptr<AdamOptimizer>(
      new AdamOptimizer(options, shard_elements));
}

absl::Status AdamOptimizer::Apply(absl::Span<float> params,
                                  absl::Span<const float> grads, int64_t step) {
  STARLING_RETURN_IF_ERROR(CheckApply(params, grads, step));
  // Subnormals as zero: each would cost ~100 normal operations.
  const FlushDenormals flush;
  // The bias corrections are per step, computed once in double:
  //   param -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + epsilon)
  // with step_size = lr / (1 - beta1^step), inv_sqrt_bc2 = 1 /
  // sqrt(1 - beta2^step). This equals the header's formula.
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(options_.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(options_.beta2), t);
  const float step_size = static_cast<float>(options_.learning_rate / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  const float b1 = options_.beta1;
  const float b2 = options_.beta2;
  const float one_minus_b1 = 1.0f - b1;
  const float one_minus_b2 = 1.0f - b2;
  const float eps = options_.epsilon;
  const float scale = options_.gradient_scale;
  const float decay = options_.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  float* m = state_slot(0).data();
  float* v = state_slot(1).data();
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) {
    const float grad = scale * g[i] + decay * p[i];
    m[i] = b1 * m[i] + one_minus_b1 * grad;
    v[i] = b2 * v[i] + one_minus_b2 * grad * grad;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + eps);
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
