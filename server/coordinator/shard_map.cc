#include "server/coordinator/shard_map.h"

#include <algorithm>

#include "server/base/logging.h"

namespace starling {
namespace coordinator {

std::vector<proto::ShardRange> ComputeShardMap(uint64_t count, int ranks) {
  STARLING_CHECK(ranks >= 1) << "ranks " << ranks;
  const uint64_t n = static_cast<uint64_t>(ranks);
  const uint64_t base = count / n;
  const uint64_t extra = count % n;
  std::vector<proto::ShardRange> map(ranks);
  for (uint64_t r = 0; r < n; ++r) {
    proto::ShardRange& range = map[r];
    range.set_rank(static_cast<int32_t>(r));
    range.set_begin_element(r * base + std::min(r, extra));
    range.set_end_element((r + 1) * base + std::min(r + 1, extra));
  }
  return map;
}

}  // namespace coordinator
}  // namespace starling
