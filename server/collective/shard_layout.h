// ShardLayout: how `count` elements split into `parts` contiguous blocks,
// the even block split of server/base/block_split.h (the first count % parts
// blocks hold one extra element). Reduce-scatter leaves block `rank` reduced
// on each rank, all-gather starts from it, and the node daemon's shard map
// uses the same split. Immutable; thread-safe.
#ifndef STARLING_SERVER_COLLECTIVE_SHARD_LAYOUT_H_
#define STARLING_SERVER_COLLECTIVE_SHARD_LAYOUT_H_

#include <cstddef>

namespace starling {
namespace collective {

class ShardLayout {
 public:
  // REQUIRES: parts >= 1.
  ShardLayout(size_t count, int parts);

  size_t count() const { return count_; }
  int parts() const { return parts_; }

  // First element of block `i`; Begin(parts()) == count().
  // REQUIRES: 0 <= i <= parts().
  size_t Begin(int i) const;
  // One past the last element of block `i`. REQUIRES: 0 <= i < parts().
  size_t End(int i) const { return Begin(i + 1); }
  // Elements in block `i`. REQUIRES: 0 <= i < parts().
  size_t Size(int i) const { return End(i) - Begin(i); }
  // Size of the largest block: ceil(count / parts).
  size_t MaxSize() const { return max_size_; }
  // The block holding element `element`. REQUIRES: element < count().
  int BlockOf(size_t element) const;

 private:
  size_t count_;
  int parts_;
  size_t max_size_;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_SHARD_LAYOUT_H_
