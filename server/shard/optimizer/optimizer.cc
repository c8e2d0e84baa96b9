#include "server/shard/optimizer/optimizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/shard/finite_check.h"

namespace starling {
namespace shard {
namespace {

absl::Status CheckRange(absl::string_view field, float value, bool ok,
                        absl::string_view range) {
  if (ok && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer option ", field, " = ", value, " must be ", range));
}

}  // namespace

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  STARLING_RETURN_IF_ERROR(CheckRange("learning_rate", o.learning_rate,
                                      o.learning_rate >= 0, "finite and >= 0"));
  STARLING_RETURN_IF_ERROR(CheckRange(
      "momentum", o.momentum, o.momentum >= 0 && o.momentum < 1, "in [0, 1)"));
  STARLING_RETURN_IF_ERROR(
      CheckRange("beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)"));
  STARLING_RETURN_IF_ERROR(
      CheckRange("beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)"));
  STARLING_RETURN_IF_ERROR(
      CheckRange("epsilon", o.epsilon, o.epsilon > 0, "finite and > 0"));
  STARLING_RETURN_IF_ERROR(CheckRange("weight_decay", o.weight_decay,
                                      o.weight_decay >= 0, "finite and >= 0"));
  STARLING_RETURN_IF_ERROR(CheckRange("gradient_scale", o.gradient_scale,
                                      o.gradient_scale > 0, "finite and > 0"));
  return absl::OkStatus();
}

Optimizer::Optimizer(const OptimizerOptions& options, size_t shard_elements,
                     int state_slots)
    : options_(options),
      shard_elements_(shard_elements),
      state_(shard_elements * static_cast<size_t>(state_slots), 0.0f) {}

absl::Status Optimizer::SetLearningRate(float learning_rate) {
  STARLING_RETURN_IF_ERROR(CheckRange("learning_rate", learning_rate,
                                      learning_rate >= 0, "finite and >= 0"));
  options_.learning_rate = learning_rate;
  return absl::OkStatus();
}

absl::Status Optimizer::SetGradientScale(float gradient_scale) {
  STARLING_RETURN_IF_ERROR(CheckRange("gradient_scale", gradient_scale,
                                      gradient_scale > 0, "finite and > 0"));
  options_.gradient_scale = gradient_scale;
  return absl::OkStatus();
}

absl::Status Optimizer::RestoreState(absl::Span<const float> state) {
  if (state.size() != state_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), " state for ", shard_elements_, " elements holds ",
                     state_.size(), " floats, got ", state.size()));
  }
  STARLING_RETURN_IF_ERROR(
      CheckFinite(state, absl::StrCat(name(), " optimizer state")));
  std::copy(state.begin(), state.end(), state_.begin());
  return absl::OkStatus();
}

absl::Status Optimizer::CheckApply(absl::Span<const float> params,
                                   absl::Span<const float> grads,
                                   int64_t step) const {
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), " step ", step, ": steps count from 1"));
  }
  if (params.size() != shard_elements_ || grads.size() != shard_elements_) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), " step ", step, ": params hold ", params.size(),
        " elements and grads ", grads.size(),
        "; the optimizer was created for a shard of ", shard_elements_));
  }
  if (options_.check_finite) {
    STARLING_RETURN_IF_ERROR(
        CheckFinite(grads, absl::StrCat(name(), " step ", step, ": gradient")));
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
