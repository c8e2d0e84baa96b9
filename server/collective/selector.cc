#include "server/collective/selector.h"

namespace starling {
namespace collective {

Algorithm SelectAlgorithm(const SelectorOptions& options, OpKind kind,
                          size_t bytes, int group_size, Algorithm requested) {
  if (requested != Algorithm::kAuto) return requested;
  if (group_size <= 1 || kind == OpKind::kBarrier) return Algorithm::kButterfly;
  if (kind == OpKind::kBroadcast) {
    return bytes < options.tree_max_bytes ? Algorithm::kTree
                                          : Algorithm::kButterfly;
  }
  if (kind == OpKind::kAllReduce) {
    if (bytes < options.allreduce_tree_max_bytes) return Algorithm::kTree;
    // Between the tree and the ring: the butterfly (recursive doubling up
    // to doubling_max_bytes).
    return bytes >= options.allreduce_ring_min_bytes ? Algorithm::kRing
                                                     : Algorithm::kButterfly;
  }
  return bytes >= options.ring_min_bytes ? Algorithm::kRing
                                         : Algorithm::kButterfly;
}

}  // namespace collective
}  // namespace starling
