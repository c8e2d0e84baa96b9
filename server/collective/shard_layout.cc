#include "server/collective/shard_layout.h"

#include "server/base/block_split.h"
#include "server/base/logging.h"

namespace starling {
namespace collective {

ShardLayout::ShardLayout(size_t count, int parts)
    : count_(count),
      parts_(parts),
      max_size_(parts > 0 ? count / parts + (count % parts > 0 ? 1 : 0) : 0) {
  STARLING_CHECK(parts >= 1) << "shard layout over " << parts << " parts";
}

size_t ShardLayout::Begin(int i) const { return BlockBegin(count_, parts_, i); }

int ShardLayout::BlockOf(size_t element) const {
  return BlockContaining(count_, parts_, element);
}

}  // namespace collective
}  // namespace starling
