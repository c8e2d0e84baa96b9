#include "server/collective/chunk_planner.h"

#include <algorithm>

#include "server/base/logging.h"
#include "server/collective/shard_layout.h"

namespace starling {
namespace collective {

ChunkPlanner::ChunkPlanner(size_t element_bytes, size_t chunk_bytes)
    : element_bytes_(element_bytes),
      chunk_bytes_(std::max(
          element_bytes, element_bytes == 0
                             ? 0
                             : chunk_bytes / element_bytes * element_bytes)) {
  STARLING_CHECK(element_bytes >= 1) << "chunk planner for 0-byte elements";
}

size_t ChunkPlanner::NumChunks(size_t range_bytes) const {
  const size_t chunks = (range_bytes + chunk_bytes_ - 1) / chunk_bytes_;
  return std::min(chunks, kMaxChunks);
}

Chunk ChunkPlanner::Get(size_t range_bytes, size_t k) const {
  const ShardLayout layout(range_bytes / element_bytes_,
                           static_cast<int>(NumChunks(range_bytes)));
  const int index = static_cast<int>(k);
  return Chunk{layout.Begin(index) * element_bytes_,
               layout.Size(index) * element_bytes_};
}

}  // namespace collective
}  // namespace starling
