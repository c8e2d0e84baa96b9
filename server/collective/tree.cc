#include "server/collective/tree.h"

#include <vector>

#include "server/collective/shard_layout.h"

namespace starling {
namespace collective {
namespace {

// Write immediate steps.
constexpr int kReduceStep = 0;
constexpr int kBroadcastStep = 1;
constexpr int kGatherStep = 2;

struct TreeNode {
  int parent = -1;  // real rank; -1 at the root
  int bit = 0;      // log2 of v's lowest set bit: our slot in the parent
  struct Child {
    int rank;
    int bit;
  };
  std::vector<Child> children;
};

int Levels(int size) {
  int levels = 0;
  while ((1 << levels) < size) ++levels;
  return levels;
}

TreeNode MakeNode(int rank, int size, int root) {
  TreeNode node;
  const int v = (rank - root + size) % size;
  for (int j = 0; (1 << j) < size; ++j) {
    const int mask = 1 << j;
    if (v & mask) {
      node.parent = (v - mask + root) % size;
      node.bit = j;
      break;
    }
    if (v + mask < size) node.children.push_back({(v + mask + root) % size, j});
  }
  return node;
}

// Reduces toward the root of `node`; at the root, each finished chunk is
// averaged and sent straight down the tree.
absl::Status ReduceUp(OpContext* ctx, const TreeNode& node) {
  const absl::Span<std::byte> data = ctx->data();
  const absl::Span<std::byte> scratch = ctx->scratch();
  const ChunkPlanner& planner = ctx->planner();
  const size_t n = data.size();
  const size_t chunks = planner.NumChunks(n);
  ctx->SetStep("reduce", 1, 1);
  for (size_t k = 0; k < chunks; ++k) {
    const Chunk c = planner.Get(n, k);
    const absl::Span<std::byte> piece =
        data.subspan(c.offset_bytes, c.length_bytes);
    for (const TreeNode::Child& child : node.children) {
      absl::Status s =
          ctx->WaitChunk(child.rank, Region::kScratch, kReduceStep, k);
      if (!s.ok()) return s;
      s = ctx->ReduceInto(piece, scratch.subspan(child.bit * n + c.offset_bytes,
                                                 c.length_bytes));
      if (!s.ok()) return s;
    }
    if (node.parent >= 0) {
      ctx->PostChunk(node.parent, piece, Region::kScratch,
                     node.bit * n + c.offset_bytes, kReduceStep, k);
      continue;
    }
    absl::Status s = ctx->AverageIfNeeded(piece);
    if (!s.ok()) return s;
    for (const TreeNode::Child& child : node.children) {
      ctx->PostChunk(child.rank, piece, Region::kData, c.offset_bytes,
                     kBroadcastStep, k);
    }
  }
  return absl::OkStatus();
}

// Non-roots receive each chunk from the parent and pass it on; the root
// posts everything (unless ReduceUp already did).
absl::Status BroadcastDown(OpContext* ctx, const TreeNode& node,
                           bool root_already_sent) {
  const absl::Span<std::byte> data = ctx->data();
  const ChunkPlanner& planner = ctx->planner();
  const size_t n = data.size();
  const size_t chunks = planner.NumChunks(n);
  ctx->SetStep("broadcast", 1, 1);
  if (node.parent < 0 && root_already_sent) return absl::OkStatus();
  for (size_t k = 0; k < chunks; ++k) {
    const Chunk c = planner.Get(n, k);
    if (node.parent >= 0) {
      absl::Status s =
          ctx->WaitChunk(node.parent, Region::kData, kBroadcastStep, k);
      if (!s.ok()) return s;
    }
    for (const TreeNode::Child& child : node.children) {
      ctx->PostChunk(child.rank, data.subspan(c.offset_bytes, c.length_bytes),
                     Region::kData, c.offset_bytes, kBroadcastStep, k);
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t TreeScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                        int size) {
  if (kind != OpKind::kAllReduce && kind != OpKind::kReduceScatter) return 0;
  return static_cast<size_t>(Levels(size)) * count * element_bytes;
}

absl::Status TreeAllReduce(OpContext* ctx) {
  const TreeNode node = MakeNode(ctx->rank(), ctx->size(), 0);
  absl::Status s = ReduceUp(ctx, node);
  if (!s.ok()) return s;
  return BroadcastDown(ctx, node, /*root_already_sent=*/true);
}

absl::Status TreeReduceScatter(OpContext* ctx) { return TreeAllReduce(ctx); }

absl::Status TreeAllGather(OpContext* ctx) {
  const ShardLayout layout(ctx->desc().count, ctx->size());
  const size_t e = ctx->element_bytes();
  const absl::Span<std::byte> data = ctx->data();
  const int rank = ctx->rank();
  ctx->SetStep("gather", 1, 1);
  if (rank != 0) {
    ctx->PostChunks(0,
                    data.subspan(layout.Begin(rank) * e, layout.Size(rank) * e),
                    Region::kData, layout.Begin(rank) * e, kGatherStep);
  } else {
    for (int peer = 1; peer < ctx->size(); ++peer) {
      const size_t chunks = ctx->planner().NumChunks(layout.Size(peer) * e);
      for (size_t k = 0; k < chunks; ++k) {
        absl::Status s = ctx->WaitChunk(peer, Region::kData, kGatherStep, k);
        if (!s.ok()) return s;
      }
    }
  }
  return BroadcastDown(ctx, MakeNode(rank, ctx->size(), 0),
                       /*root_already_sent=*/false);
}

absl::Status TreeBroadcast(OpContext* ctx) {
  return BroadcastDown(ctx,
                       MakeNode(ctx->rank(), ctx->size(), ctx->desc().root),
                       /*root_already_sent=*/false);
}

}  // namespace collective
}  // namespace starling
