// Optimizer: the update a node daemon applies to its own shard once the
// reduce-scatter has left the shard's summed gradient (DESIGN.md step 4).
//
// An optimizer is made for one shard: its state (momentum buffer, Adam
// moments) is allocated for exactly `shard_elements` elements at creation,
// so a rank holds 1/N of a replicated optimizer's state. Every Apply must
// pass params and grads of that length.
//
// Gradient scale: the reduce-scatter leaves a sum over the contributing
// workers. Each update first computes g = gradient_scale * grad, so
// gradient_scale = 1 / num_workers turns the sum into a mean (default 1:
// gradients arrive already averaged). It is an option and not an Apply
// argument so that the interface stays the same for every caller; the daemon
// calls SetGradientScale() when the number of workers changes.
//
// Weight decay is L2: g += weight_decay * param, after scaling, for every
// optimizer (for Adam this is torch.optim.Adam's coupled form, not AdamW).
//
// Thread-compatible: one shard, one updater thread at a time.
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/base/optimizer_names.h"

namespace starling {
namespace shard {

struct OptimizerOptions {
  // "sgd", "momentum" or "adam" (CreateOptimizer dispatches on it).
  std::string name = "sgd";
  // Step size, finite and >= 0.
  float learning_rate = 0.01f;
  // momentum: the velocity decay, in [0, 1).
  float momentum = static_cast<float>(kDaemonMomentum);
  // momentum: Nesterov's form (update with g + momentum * v).
  bool nesterov = false;
  // adam: decay of the first and second moment estimates, each in [0, 1).
  float beta1 = static_cast<float>(kDaemonAdamBeta1);
  float beta2 = static_cast<float>(kDaemonAdamBeta2);
  // adam: added to the denominator, > 0.
  float epsilon = 1e-8f;
  // L2 coefficient, finite and >= 0; 0 turns it off.
  float weight_decay = 0.0f;
  // Multiplies every gradient before use (see above); finite and > 0.
  float gradient_scale = 1.0f;
  // Scan grads for NaN/infinity before touching anything, and fail with
  // InvalidArgument naming the first bad element (index within the shard).
  // Off saves one pass over the gradient; a NaN then spreads into the shard.
  bool check_finite = true;
};

// InvalidArgument naming the first field out of range. Does not look at
// `name`.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& options);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates `params` in place from `grads`. `step` is the 1-based number of
  // this update (Adam's bias correction uses it), so a daemon counting steps
  // from 0 passes step + 1. On error nothing is modified. InvalidArgument if
  // params or grads do not hold shard_elements() elements, step < 1, or
  // (check_finite) a gradient is NaN or infinite.
  virtual absl::Status Apply(absl::Span<float> params,
                             absl::Span<const float> grads, int64_t step) = 0;

  // Bytes of optimizer state: shard_elements() * 4 * floats per element
  // (SGD 0, momentum 1, Adam 2).
  virtual uint64_t StateBytes() const = 0;

  // "sgd", "momentum", "adam".
  virtual absl::string_view name() const = 0;

  size_t shard_elements() const { return shard_elements_; }
  const OptimizerOptions& options() const { return options_; }

  // Change hyperparameters between steps (learning-rate schedule, a new
  // number of workers). InvalidArgument, leaving the old value, for a
  // learning rate that is negative or not finite, or a scale that is not
  // finite and > 0.
  absl::Status SetLearningRate(float learning_rate);
  absl::Status SetGradientScale(float gradient_scale);

  // The whole state as one float vector, slot by slot (Adam: first moments,
  // then second moments); empty for SGD. For shard checkpoints.
  absl::Span<const float> state() const { return state_; }
  // Replaces the state with `state`, as state() returned it.
  // InvalidArgument if the length differs or a value is not finite.
  absl::Status RestoreState(absl::Span<const float> state);

 protected:
  // Allocates `state_slots` zeroed floats per element.
  // REQUIRES: ValidateOptimizerOptions(options).ok().
  Optimizer(const OptimizerOptions& options, size_t shard_elements,
            int state_slots);

  // The checks Apply promises, with messages naming name() and step.
  absl::Status CheckApply(absl::Span<const float> params,
                          absl::Span<const float> grads, int64_t step) const;

  // Slot `slot` of the state: shard_elements() floats.
  // REQUIRES: 0 <= slot < state_slots.
  absl::Span<float> state_slot(int slot) {
    return absl::MakeSpan(state_).subspan(slot * shard_elements_,
                                          shard_elements_);
  }
  uint64_t state_bytes() const { return state_.size() * sizeof(float); }

  OptimizerOptions options_;

 private:
  size_t shard_elements_;
  std::vector<float> state_;
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_H_
