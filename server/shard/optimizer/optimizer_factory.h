// CreateOptimizer: builds the optimizer that OptimizerOptions::name names,
// sized for one shard. Free function; thread-safe.
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_FACTORY_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_FACTORY_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace shard {

// An optimizer for a shard of `shard_elements` elements (state allocated
// here). options.name is one of OptimizerNames(OptimizerFilter::kUpdating)
// (server/base/optimizer_names.h: "sgd", "momentum", "adam"; exact, lower
// case), whose state_slots its StateBytes() follows.
// InvalidArgument for another name (the message lists the valid ones) or an
// option out of range; ResourceExhausted is not returned: allocation failure
// aborts like any std::vector.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options, size_t shard_elements);

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_OPTIMIZER_FACTORY_H_
