// Binomial-tree collectives for small messages: reduce to a root then
// broadcast back, 2 * ceil(log2 N) latencies with the whole vector at every
// hop. Chunks are pipelined: a rank forwards chunk k toward the root as soon
// as it has reduced chunk k from all its children, and forwards broadcast
// chunk k to its children as soon as it lands.
//
// Tree numbering is relative to the root (v = (rank - root) mod N): the
// parent of v clears v's lowest set bit; the children of v are v + 2^j for
// each 2^j below v's lowest set bit. Free functions; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_TREE_H_
#define STARLING_SERVER_COLLECTIVE_TREE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "server/collective/op_context.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

// Scratch bytes the tree needs: one vector per possible child.
size_t TreeScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                        int size);

// Reduce to rank 0, broadcast from rank 0.
absl::Status TreeAllReduce(OpContext* ctx);
// Reduce-scatter as a full all-reduce (every block ends up reduced).
absl::Status TreeReduceScatter(OpContext* ctx);
// Every rank writes its block to rank 0, which broadcasts the whole vector.
absl::Status TreeAllGather(OpContext* ctx);
// Binomial broadcast from desc().root.
absl::Status TreeBroadcast(OpContext* ctx);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_TREE_H_
