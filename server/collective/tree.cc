#include "server/collective/tree.h"

#include <vector>

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
          ctx->ReduceChunkFromScratch(child.rank, kReduceStep, child.bit, k, c);
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
  absl::Status gathered = ctx->GatherBlocksToRankZero(kGatherStep);
  if (!gathered.ok()) return gathered;
  return BroadcastDown(ctx, MakeNode(ctx->rank(), ctx->size(), 0),
                       /*root_already_sent=*/false);
}

absl::Status TreeBroadcast(OpContext* ctx) {
  return BroadcastDown(ctx,
                       MakeNode(ctx->rank(), ctx->size(), ctx->desc().root),
                       /*root_already_sent=*/false);
}

}  // namespace collective
}  // namespace starling
