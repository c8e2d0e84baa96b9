// The even block split: `count` elements cut into `parts` contiguous
// blocks, block i starting at i * (count / parts) + min(i, count % parts),
// so the first count % parts blocks hold one element more. It is the one
// definition of the shard map: reduce-scatter leaves block `rank` on each
// rank (collective::ShardLayout) and the coordinator hands out the same
// ranges (coordinator::ComputeShardMap). Stateless functions; thread-safe.
#ifndef STARLING_SERVER_BASE_BLOCK_SPLIT_H_
#define STARLING_SERVER_BASE_BLOCK_SPLIT_H_

#include <cstdint>

namespace starling {

// First element of block `i`; BlockBegin(count, parts, parts) == count.
// REQUIRES: parts >= 1, 0 <= i <= parts.
uint64_t BlockBegin(uint64_t count, int parts, int i);

// The block that holds `element`. REQUIRES: parts >= 1, element < count.
int BlockContaining(uint64_t count, int parts, uint64_t element);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_BLOCK_SPLIT_H_
