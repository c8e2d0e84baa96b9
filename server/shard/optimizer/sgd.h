// SgdOptimizer: plain stochastic gradient descent on one shard,
//   g = gradient_scale * grad + weight_decay * param
//   param -= learning_rate * g
// No state. Thread-compatible.
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_SGD_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_SGD_H_

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

class SgdOptimizer : public Optimizer {
 public:
  // Uses learning_rate, weight_decay, gradient_scale and check_finite;
  // ignores options.name. InvalidArgument for options out of range.
  static absl::StatusOr<std::unique_ptr<SgdOptimizer>> Create(
      const OptimizerOptions& options, size_t shard_elements);

  absl::Status Apply(absl::Span<float> params, absl::Span<const float> grads,
                     int64_t step) override;
  uint64_t StateBytes() const override { return state_bytes(); }
  absl::string_view name() const override { return "sgd"; }

 private:
  SgdOptimizer(const OptimizerOptions& options, size_t shard_elements)
      : Optimizer(options, shard_elements, /*state_slots=*/0) {}
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_SGD_H_
