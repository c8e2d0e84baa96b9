#include "server/coordinator/shard_map.h"

#include "server/base/block_split.h"
#include "server/base/logging.h"

namespace starling {
namespace coordinator {

std::vector<proto::ShardRange> ComputeShardMap(uint64_t count, int ranks) {
  STARLING_CHECK(ranks >= 1) << "ranks " << ranks;
  std::vector<proto::ShardRange> map(ranks);
  for (int r = 0; r < ranks; ++r) {
    proto::ShardRange& range = map[r];
    range.set_rank(r);
    range.set_begin_element(BlockBegin(count, ranks, r));
    range.set_end_element(BlockBegin(count, ranks, r + 1));
  }
  return map;
}

}  // namespace coordinator
}  // namespace starling
