#include "server/shard/optimizer/momentum.h"

#include "server/base/flush_denormals.h"
#include "server/base/status_macros.h"

namespace starling {
namespace shard {

absl::StatusOr<std::unique_ptr<MomentumOptimizer>> MomentumOptimizer::Create(
    const OptimizerOptions& options, size_t shard_elements) {
  STARLING_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  return std::unique_ptr<MomentumOptimizer>(
      new MomentumOptimizer(options, shard_elements));
}

absl::Status MomentumOptimizer::Apply(absl::Span<float> params,
                                      absl::Span<const float> grads,
                                      int64_t step) {
  STARLING_RETURN_IF_ERROR(CheckApply(params, grads, step));
  // Subnormals as zero: each would cost ~100 normal operations.
  const FlushDenormals flush;
  const float lr = options_.learning_rate;
  const float mu = options_.momentum;
  const float scale = options_.gradient_scale;
  const float decay = options_.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  float* v = state_slot(0).data();
  const size_t n = params.size();
  // Two loops rather than a branch per element, so each vectorizes.
  if (options_.nesterov) {
    for (size_t i = 0; i < n; ++i) {
      const float grad = scale * g[i] + decay * p[i];
      v[i] = mu * v[i] + grad;
      p[i] -= lr * (grad + mu * v[i]);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      const float grad = scale * g[i] + decay * p[i];
      v[i] = mu * v[i] + grad;
      p[i] -= lr * v[i];
    }
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
