#include "server/collective/shard_layout.h"

#include <algorithm>

#include "server/base/logging.h"

namespace starling {
namespace collective {

ShardLayout::ShardLayout(size_t count, int parts)
    : count_(count),
      parts_(parts),
      base_(parts > 0 ? count / parts : 0),
      extra_(parts > 0 ? count % parts : 0) {
  STARLING_CHECK(parts >= 1) << "shard layout over " << parts << " parts";
}

size_t ShardLayout::Begin(int i) const {
  const size_t index = static_cast<size_t>(i);
  return index * base_ + std::min(index, extra_);
}

int ShardLayout::BlockOf(size_t element) const {
  // The first extra_ blocks are (base_ + 1) long, the rest base_ long.
  const size_t long_span = extra_ * (base_ + 1);
  if (element < long_span) return static_cast<int>(element / (base_ + 1));
  return static_cast<int>(extra_ + (element - long_span) / base_);
}

}  // namespace collective
}  // namespace starling
