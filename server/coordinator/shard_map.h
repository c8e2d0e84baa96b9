// The shard map: which contiguous range of the flat parameter vector each
// rank owns, as proto::ShardRange. The split itself is the one definition
// in server/base/block_split.h, which server/collective's ShardLayout
// (reduce-scatter leaves block r on rank r) computes the same way.
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
