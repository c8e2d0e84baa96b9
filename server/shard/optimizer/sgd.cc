#include "server/shard/optimizer/sgd.h"

#include "server/base/flush_denormals.h"
#include "server/base/status_macros.h"

namespace starling {
namespace shard {

absl::StatusOr<std::unique_ptr<SgdOptimizer>> SgdOptimizer::Create(
    const OptimizerOptions& options, size_t shard_elements) {
  STARLING_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  return std::unique_ptr<SgdOptimizer>(
      new SgdOptimizer(options, shard_elements));
}

absl::Status SgdOptimizer::Apply(absl::Span<float> params,
                                 absl::Span<const float> grads, int64_t step) {
  STARLING_RETURN_IF_ERROR(CheckApply(params, grads, step));
  // Subnormals as zero: each would cost ~100 normal operations.
  const FlushDenormals flush;
  // Hoisted into locals so the loop has no loads through `this` and
  // vectorizes.
  const float lr = options_.learning_rate;
  const float scale = options_.gradient_scale;
  const float decay = options_.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) {
    const float grad = scale * g[i] + decay * p[i];
    p[i] -= lr * grad;
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
