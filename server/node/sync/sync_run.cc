#include "server/node/sync/sync_run.h"

#include <algorithm>
#include <memory>
#include <utility>

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

// The replica of rank `rank - distance`'s master shard.
absl::Status AddReplica(SyncRun& run, const RunFactoryOptions& options) {
  const int distance = options.buddy_distance;
  if (distance < 0 || distance >= std::max(options.ranks, 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("buddy distance ", distance, " is not in [0, ",
                     options.ranks, ") for a group of ", options.ranks));
  }
  if (distance == 0 || options.ranks < 2) return absl::OkStatus();
  // A shard that never changes needs no second copy.
  if (options.optimizer == "none") return absl::OkStatus();
  auto replica = std::make_unique<ShardReplica>();
  replica->distance = distance;
  replica->of_rank = (options.rank - distance + options.ranks) % options.ranks;
  uint64_t offset = 0;
  for (const Bucket& bucket : run.buckets) {
    const collective::ShardLayout parts(bucket.end - bucket.begin,
                                        options.ranks);
    ShardReplica::Part part;
    part.begin = bucket.begin + parts.Begin(replica->of_rank);
    part.end = bucket.begin + parts.End(replica->of_rank);
    part.offset = offset;
    offset += part.end - part.begin;
    replica->parts.push_back(part);
    replica->half += parts.MaxSize();
  }
  replica->master.assign(offset, 0.0f);
  if (run.wire != collective::DataType::kFloat32) {
    replica->narrowed.assign(offset, 0);
  }
  // The shift's buffer: the reduced gradients and, after them, the owner's.
  run.master_gradients.resize(2 * replica->half, 0.0f);
  // What the last update overwrote (sync_run.h, continuation).
  run.undo_master.assign(run.master.size(), 0.0f);
  run.undo_state.assign(run.optimizer->state().size(), 0.0f);
  STARLING_ASSIGN_OR_RETURN(
      replica->optimizer,
      CreateRunOptimizer(options, offset, run.total_workers));
  run.replica = std::move(replica);
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
  STARLING_RETURN_IF_ERROR(AddReplica(*run, options));
  return run;
}

}  // namespace node
}  // namespace starling
