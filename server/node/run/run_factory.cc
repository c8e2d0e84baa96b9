#include "server/node/run/run_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/tensor_table.h"
#include "server/base/status_macros.h"
#include "server/collective/shard_layout.h"
#include "server/shard/optimizer/optimizer_factory.h"
#include "server/shard/shard_store.h"

namespace starling {
namespace node {

absl::StatusOr<std::shared_ptr<Run>> CreateRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options) {
  auto run = std::make_shared<Run>();
  run->id = options.run_id;
  run->layout = TensorLayout::FromSpecs(tensors);
  run->total_workers = options.total_workers;
  run->started = absl::Now();
  bool all_half = !run->layout.tensors.empty();
  bool all_bfloat = !run->layout.tensors.empty();
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
    all_half = all_half && dtype == proto::DATA_TYPE_FLOAT16;
    all_bfloat = all_bfloat && dtype == proto::DATA_TYPE_BFLOAT16;
  }
  run->wire = all_half     ? collective::DataType::kFloat16
              : all_bfloat ? collective::DataType::kBFloat16
                           : collective::DataType::kFloat32;
  // Buckets: consecutive tensors, numbered from the end of the table.
  const int tensors_count = static_cast<int>(run->layout.tensors.size());
  for (int t = tensors_count - 1; t >= 0; --t) {
    const TensorLayout::Entry& entry = run->layout.tensors[t];
    const int bucket = entry.spec.bucket();
    if (bucket == static_cast<int>(run->buckets.size())) {
      Bucket next;
      next.end = entry.offset + entry.elements;
      next.end_tensor = t + 1;
      run->buckets.push_back(next);
    } else if (bucket != static_cast<int>(run->buckets.size()) - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", entry.spec.name(), "' is in bucket ", bucket,
          " after a tensor of bucket ", run->buckets.size() - 1,
          " (a bucket holds consecutive tensors, numbered from the last)"));
    }
    run->buckets.back().begin = entry.offset;
    run->buckets.back().first_tensor = t;
  }
  uint64_t master = 0;
  for (Bucket& bucket : run->buckets) {
    const collective::ShardLayout parts(bucket.end - bucket.begin,
                                        options.ranks);
    bucket.owned_begin = bucket.begin + parts.Begin(options.rank);
    bucket.owned_end = bucket.begin + parts.End(options.rank);
    bucket.master_offset = master;
    master += bucket.owned_end - bucket.owned_begin;
  }
  run->master.assign(master, 0.0f);
  run->master_gradients.assign(master, 0.0f);
  if (run->wire != collective::DataType::kFloat32) {
    run->wire16.assign(run->layout.total_elements, 0);
  }
  shard::ShardStoreOptions store_options;
  store_options.total_elements = run->layout.total_elements;
  store_options.ranks = options.ranks;
  store_options.rank = options.rank;
  STARLING_ASSIGN_OR_RETURN(run->store,
                            shard::ShardStore::Create(store_options));
  shard::OptimizerOptions optimizer_options;
  optimizer_options.name = options.optimizer;
  optimizer_options.learning_rate = options.learning_rate;
  if (optimizer_options.name == "none") {
    optimizer_options.name = "sgd";
    optimizer_options.learning_rate = 0.0f;
  }
  STARLING_ASSIGN_OR_RETURN(
      run->optimizer, shard::CreateOptimizer(
                          optimizer_options,
                          options.master_shard ? run->master.size()
                                               : run->store->shard_elements()));
  // Gradients are averaged over the workers; the EASGD centre adds the
  // workers' elastic differences as they are (each already weighted by
  // alpha).
  if (optimizer_options.name != "easgd") {
    STARLING_RETURN_IF_ERROR(run->optimizer->SetGradientScale(
        1.0f / static_cast<float>(std::max(1, run->total_workers))));
  }
  return run;
}

}  // namespace node
}  // namespace starling
