#include "server/node/run/run_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"
#include "server/shard/optimizer/optimizer_factory.h"
#include "server/shard/shard_store.h"

namespace starling {
namespace node {

absl::Status InitRun(const std::vector<proto::TensorSpec>& tensors,
                     const RunFactoryOptions& options, Run* run) {
  run->id = options.run_id;
  run->layout = TensorLayout::FromSpecs(tensors);
  run->total_workers = options.total_workers;
  run->started = absl::Now();
  for (const TensorLayout::Entry& entry : run->layout.tensors) {
    const proto::DataType dtype = entry.spec.dtype();
    if (dtype != proto::DATA_TYPE_FLOAT32 &&
        dtype != proto::DATA_TYPE_FLOAT16 &&
        dtype != proto::DATA_TYPE_BFLOAT16) {
      return absl::UnimplementedError(
          absl::StrCat("tensor '", entry.spec.name(), "' is ",
                       proto::DescribeSpec(entry.spec),
                       ": parameters are float32, float16 or bfloat16"));
    }
  }
  shard::ShardStoreOptions store_options;
  store_options.total_elements = run->layout.total_elements;
  store_options.ranks = options.ranks;
  store_options.rank = options.rank;
  STARLING_ASSIGN_OR_RETURN(run->store,
                            shard::ShardStore::Create(store_options));
  return absl::OkStatus();
}

absl::Status AddOptimizer(const RunFactoryOptions& options, size_t elements,
                          Run* run) {
  STARLING_ASSIGN_OR_RETURN(
      run->optimizer,
      CreateRunOptimizer(options, elements, run->total_workers));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<shard::Optimizer>> CreateRunOptimizer(
    const RunFactoryOptions& options, size_t elements, int total_workers) {
  shard::OptimizerOptions optimizer_options;
  optimizer_options.name = options.optimizer;
  optimizer_options.learning_rate = options.learning_rate;
  if (optimizer_options.name == "none") {
    optimizer_options.name = "sgd";
    optimizer_options.learning_rate = 0.0f;
  }
  STARLING_ASSIGN_OR_RETURN(
      std::unique_ptr<shard::Optimizer> optimizer,
      shard::CreateOptimizer(optimizer_options, elements));
  // Gradients are averaged over the workers; the EASGD centre adds the
  // workers' elastic differences as they are (each already weighted by
  // alpha).
  if (optimizer_options.name != "easgd") {
    STARLING_RETURN_IF_ERROR(optimizer->SetGradientScale(
        1.0f / static_cast<float>(std::max(1, total_workers))));
  }
  return optimizer;
}

}  // namespace node
}  // namespace starling
