#include "server/collective/selector.h"

namespace starling {
namespace collective {

Algorithm SelectAlgorithm(const SelectorOptions& options, OpKind kind,
                          size_t bytes, int group_size, Algorithm requested) {
  if (requested != Algorithm::kAuto) return requested;
  if (group_size <= 1 || kind == OpKind::kBarrier) return Algorithm::kButterfly;
  const bool small = bytes < options.tree_max_bytes;
  if (kind == OpKind::kBroadcast) {
    return small ? Algorithm::kTree : Algorithm::kButterfly;
  }
  // Small all-reduces: the butterfly's recursive doubling (log2 N latencies;
  // the tree needs 2 log2 N).
  if (kind == OpKind::kAllReduce && small) return Algorithm::kButterfly;
  const bool power_of_two = (group_size & (group_size - 1)) == 0;
  if (!power_of_two && bytes >= options.ring_min_bytes) return Algorithm::kRing;
  return Algorithm::kButterfly;
}

}  // namespace collective
}  // namespace starling
