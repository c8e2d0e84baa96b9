// The shard map: which contiguous range of the flat parameter vector each
// rank owns. `count` elements split into `ranks` blocks; block r starts at
// r * (count / ranks) + min(r, count % ranks), so the first count % ranks
// ranks hold one extra element. This is the ShardLayout rule of
// server/collective (reduce-scatter leaves block r on rank r), restated
// here because the coordinator depends only on proto and base.
// Stateless; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_SHARD_MAP_H_
#define STARLING_SERVER_COORDINATOR_SHARD_MAP_H_

#include <cstdint>
#include <vector>

#include "proto/common.pb.h"

namespace starling {
namespace coordinator {

// One ShardRange per rank, index = rank, covering [0, count) exactly.
// REQUIRES: ranks >= 1.
std::vector<proto::ShardRange> ComputeShardMap(uint64_t count, int ranks);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_SHARD_MAP_H_
