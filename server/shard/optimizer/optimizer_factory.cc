#include "server/shard/optimizer/optimizer_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/optimizer_names.h"
#include "server/base/status_macros.h"
#include "server/shard/optimizer/adam.h"
#include "server/shard/optimizer/easgd.h"
#include "server/shard/optimizer/momentum.h"
#include "server/shard/optimizer/sgd.h"

namespace starling {
namespace shard {

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerOptions& options, size_t shard_elements) {
  const std::string& name = options.name;
  std::unique_ptr<Optimizer> optimizer;
  if (name == "sgd") {
    STARLING_ASSIGN_OR_RETURN(optimizer,
                              SgdOptimizer::Create(options, shard_elements));
  } else if (name == "momentum") {
    STARLING_ASSIGN_OR_RETURN(
        optimizer, MomentumOptimizer::Create(options, shard_elements));
  } else if (name == "adam") {
    STARLING_ASSIGN_OR_RETURN(optimizer,
                              AdamOptimizer::Create(options, shard_elements));
  } else if (name == "easgd") {
    STARLING_ASSIGN_OR_RETURN(
        optimizer, ElasticCenterOptimizer::Create(options, shard_elements));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown optimizer '", name, "'; valid optimizers: ",
        absl::StrJoin(OptimizerNames(OptimizerFilter::kUpdating), ", ")));
  }
  return optimizer;
}

}  // namespace shard
}  // namespace starling
