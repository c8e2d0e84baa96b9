#include "server/node/sync/sync_run.h"

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/collective/shard_layout.h"

namespace starling {
namespace node {
namespace {

// Buckets: consecutive tensors, numbered from the end of the table.
absl::Status CutBuckets(SyncRun& run, const RunFactoryOptions& options) {
  const int tensors_count = static_cast<int>(run.layout.tensors.size());
  for (int t = tensors_count - 1; t >= 0; --t) {
    const TensorLayout::Entry& entry = run.layout.tensors[t];
    const int bucket = entry.spec.bucket();
    if (bucket == static_cast<int>(run.buckets.size())) {
      Bucket next;
      next.end = entry.offset + entry.elements;
      next.end_tensor = t + 1;
      run.buckets.push_back(next);
    } else if (bucket != static_cast<int>(run.buckets.size()) - 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", entry.spec.name(), "' is in bucket ", bucket,
          " after a tensor of bucket ", run.buckets.size() - 1,
          " (a bucket holds consecutive tensors, numbered from the last)"));
    }
    run.buckets.back().begin = entry.offset;
    run.buckets.back().first_tensor = t;
  }
  uint64_t master = 0;
  for (Bucket& bucket : run.buckets) {
    const collective::ShardLayout parts(bucket.end - bucket.begin,
                                        options.ranks);
    bucket.owned_begin = bucket.begin + parts.Begin(options.rank);
    bucket.owned_end = bucket.begin + parts.End(options.rank);
    bucket.master_offset = master;
    master += bucket.owned_end - bucket.owned_begin;
  }
  run.master.assign(master, 0.0f);
  run.master_gradients.assign(master, 0.0f);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<SyncRun>> CreateSyncRun(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options) {
  auto run = std::make_shared<SyncRun>();
  STARLING_RETURN_IF_ERROR(InitRun(tensors, options, run.get()));
  bool all_half = !run->layout.tensors.empty();
  bool all_bfloat = !run->layout.tensors.empty();
  for (const TensorLayout::Entry& entry : run->layout.tensors) {
    all_half = all_half && entry.spec.dtype() == proto::DATA_TYPE_FLOAT16;
    all_bfloat = all_bfloat && entry.spec.dtype() == proto::DATA_TYPE_BFLOAT16;
  }
  run->wire = all_half     ? collective::DataType::kFloat16
              : all_bfloat ? collective::DataType::kBFloat16
                           : collective::DataType::kFloat32;
  STARLING_RETURN_IF_ERROR(CutBuckets(*run, options));
  if (run->wire != collective::DataType::kFloat32) {
    run->wire16.assign(run->layout.total_elements, 0);
  }
  STARLING_RETURN_IF_ERROR(
      AddOptimizer(options, run->master.size(), run.get()));
  return run;
}

}  // namespace node
}  // namespace starling
