#include "server/base/block_split.h"

#include <algorithm>

#include "server/base/logging.h"

namespace starling {

uint64_t BlockBegin(uint64_t count, int parts, int i) {
  STARLING_CHECK(parts >= 1 && i >= 0 && i <= parts)
      << "block " << i << " of " << parts;
  const uint64_t n = static_cast<uint64_t>(parts);
  const uint64_t index = static_cast<uint64_t>(i);
  return index * (count / n) + std::min(index, count % n);
}

int BlockContaining(uint64_t count, int parts, uint64_t element) {
  STARLING_CHECK(parts >= 1 && element < count)
      << "element " << element << " of " << count << " in " << parts
      << " blocks";
  const uint64_t base = count / static_cast<uint64_t>(parts);
  const uint64_t extra = count % static_cast<uint64_t>(parts);
  // The first `extra` blocks are base + 1 long, the rest base long.
  const uint64_t long_span = extra * (base + 1);
  if (element < long_span) return static_cast<int>(element / (base + 1));
  return static_cast<int>(extra + (element - long_span) / base);
}

}  // namespace starling
