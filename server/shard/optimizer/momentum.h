// MomentumOptimizer: SGD with heavy-ball or Nesterov momentum on one shard,
// in the form of torch.optim.SGD (dampening 0):
//   g = gradient_scale * grad + weight_decay * param
//   v = momentum * v + g                      (v starts at 0)
//   param -= learning_rate * v                (heavy ball)
//   param -= learning_rate * (g + momentum * v)   (nesterov)
// State: v, one float per element. Thread-compatible.
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_MOMENTUM_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_MOMENTUM_H_

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

class MomentumOptimizer : public Optimizer {
 public:
  // Uses learning_rate, momentum, nesterov, weight_decay, gradient_scale and
  // check_finite; ignores options.name. InvalidArgument for options out of
  // range.
  static absl::StatusOr<std::unique_ptr<MomentumOptimizer>> Create(
      const OptimizerOptions& options, size_t shard_elements);

  absl::Status Apply(absl::Span<float> params, absl::Span<const float> grads,
                     int64_t step) override;
  uint64_t StateBytes() const override { return state_bytes(); }
  absl::string_view name() const override { return "momentum"; }

 private:
  MomentumOptimizer(const OptimizerOptions& options, size_t shard_elements)
      : Optimizer(options, shard_elements, /*state_slots=*/1) {}
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_MOMENTUM_H_
