// AdamOptimizer: Adam (Kingma & Ba) on one shard, in the form of
// torch.optim.Adam (L2 weight decay added to the gradient, not AdamW):
//   g = gradient_scale * grad + weight_decay * param
//   m = beta1 * m + (1 - beta1) * g            (m, v start at 0)
//   v = beta2 * v + (1 - beta2) * g * g
//   param -= learning_rate * (m / (1 - beta1^step))
//            / (sqrt(v / (1 - beta2^step)) + epsilon)
// with `step` the 1-based update number passed to Apply. State: m and v, two
// floats per element. Thread-compatible.
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_ADAM_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_ADAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace shard {

class AdamOptimizer : public Optimizer {
 public:
  // Uses learning_rate, beta1, beta2, epsilon, weight_decay, gradient_scale
  // and check_finite; ignores options.name. InvalidArgument for options out
  // of range.
  static absl::StatusOr<std::unique_ptr<AdamOptimizer>> Create(
      const OptimizerOptions& options, size_t shard_elements);

  absl::Status Apply(absl::Span<float> params, absl::Span<const float> grads,
                     int64_t step) override;
  uint64_t StateBytes() const override { return state_bytes(); }
  absl::string_view name() const override { return "adam"; }

 private:
  AdamOptimizer(const OptimizerOptions& options, size_t shard_elements)
      : Optimizer(options, shard_elements, /*state_slots=*/2) {}
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_ADAM_H_
