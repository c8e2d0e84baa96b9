#include "server/collective/ring.h"

#include "server/collective/shard_layout.h"

namespace starling {
namespace collective {
namespace {

// Reduce-scatter, step s (0 <= s < N-1): rank r sends block (r - s - 1) and
// receives block (r - s - 2) from its left neighbour, which it reduces into
// its own copy; the block received in step s is the one sent in step s+1, so
// after N-1 steps block r holds every rank's contribution. The left
// neighbour may run up to N-2 steps ahead (its progress does not depend on
// us), so each step receives into its own scratch area of the largest
// block's size.
//
// All-gather, step s: rank r sends block (r - s) and receives block
// (r - s - 1) straight into its data buffer, forwarding it in step s+1.
// Write immediate steps: reduce-scatter 0..N-2, all-gather N-1..2N-3.
// (The scatter of a broadcast uses step 2N-2.)
class RingShape {
 public:
  explicit RingShape(const OpContext& ctx)
      : size_(ctx.size()),
        rank_(ctx.rank()),
        element_bytes_(ctx.element_bytes()),
        layout_(ctx.desc().count, ctx.size()) {}

  int Block(int offset) const {
    return ((rank_ + offset) % size_ + size_) % size_;
  }
  size_t Offset(int block) const {
    return layout_.Begin(block) * element_bytes_;
  }
  size_t Length(int block) const {
    return layout_.Size(block) * element_bytes_;
  }
  size_t AreaBytes() const { return layout_.MaxSize() * element_bytes_; }
  int left() const { return Block(-1); }
  int right() const { return Block(1); }
  int size() const { return size_; }

 private:
  int size_;
  int rank_;
  size_t element_bytes_;
  ShardLayout layout_;
};

absl::Status ReduceScatterPhase(OpContext* ctx, const RingShape& ring) {
  const int n = ring.size();
  const absl::Span<std::byte> data = ctx->data();
  const int own = ring.Block(0);
  const absl::Span<std::byte> own_block =
      data.subspan(ring.Offset(own), ring.Length(own));
  if (n == 1) return ctx->AverageIfNeeded(own_block);
  const absl::Span<std::byte> scratch = ctx->scratch();
  const ChunkPlanner& planner = ctx->planner();
  const int first = ring.Block(-1);
  ctx->PostChunks(ring.right(),
                  data.subspan(ring.Offset(first), ring.Length(first)),
                  Region::kScratch, 0, /*step=*/0);
  for (int s = 0; s < n - 1; ++s) {
    ctx->SetStep("reduce-scatter", s + 1, n - 1);
    const int block = ring.Block(-s - 2);
    const absl::Span<std::byte> mine =
        data.subspan(ring.Offset(block), ring.Length(block));
    const size_t area = s * ring.AreaBytes();
    const size_t chunks = planner.NumChunks(mine.size());
    for (size_t k = 0; k < chunks; ++k) {
      absl::Status status = ctx->WaitChunk(ring.left(), Region::kScratch, s, k);
      if (!status.ok()) return status;
      const Chunk c = planner.Get(mine.size(), k);
      const absl::Span<std::byte> piece =
          mine.subspan(c.offset_bytes, c.length_bytes);
      status = ctx->ReduceInto(
          piece, scratch.subspan(area + c.offset_bytes, c.length_bytes));
      if (!status.ok()) return status;
      if (s < n - 2) {
        ctx->PostChunk(ring.right(), piece, Region::kScratch,
                       (s + 1) * ring.AreaBytes() + c.offset_bytes, s + 1, k);
      }
    }
  }
  return ctx->AverageIfNeeded(own_block);
}

// REQUIRES: block Block(0) of data holds this rank's contribution.
absl::Status AllGatherPhase(OpContext* ctx, const RingShape& ring) {
  const int n = ring.size();
  if (n == 1) return absl::OkStatus();
  const absl::Span<std::byte> data = ctx->data();
  const ChunkPlanner& planner = ctx->planner();
  const int base_step = n - 1;
  const int own = ring.Block(0);
  ctx->PostChunks(ring.right(),
                  data.subspan(ring.Offset(own), ring.Length(own)),
                  Region::kData, ring.Offset(own), base_step);
  for (int s = 0; s < n - 1; ++s) {
    ctx->SetStep("all-gather", s + 1, n - 1);
    const int block = ring.Block(-s - 1);
    const absl::Span<std::byte> theirs =
        data.subspan(ring.Offset(block), ring.Length(block));
    const size_t chunks = planner.NumChunks(theirs.size());
    for (size_t k = 0; k < chunks; ++k) {
      absl::Status status =
          ctx->WaitChunk(ring.left(), Region::kData, base_step + s, k);
      if (!status.ok()) return status;
      if (s < n - 2) {
        const Chunk c = planner.Get(theirs.size(), k);
        ctx->PostChunk(ring.right(),
                       theirs.subspan(c.offset_bytes, c.length_bytes),
                       Region::kData, ring.Offset(block) + c.offset_bytes,
                       base_step + s + 1, k);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t RingScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                        int size) {
  if (kind != OpKind::kAllReduce && kind != OpKind::kReduceScatter) return 0;
  const ShardLayout layout(count, size);
  return static_cast<size_t>(size - 1) * layout.MaxSize() * element_bytes;
}

absl::Status RingAllReduce(OpContext* ctx) {
  const RingShape ring(*ctx);
  absl::Status s = ReduceScatterPhase(ctx, ring);
  if (!s.ok()) return s;
  return AllGatherPhase(ctx, ring);
}

absl::Status RingReduceScatter(OpContext* ctx) {
  return ReduceScatterPhase(ctx, RingShape(*ctx));
}

absl::Status RingAllGather(OpContext* ctx) {
  return AllGatherPhase(ctx, RingShape(*ctx));
}

absl::Status RingBroadcast(OpContext* ctx) {
  const RingShape ring(*ctx);
  const int n = ring.size();
  const int rank = ctx->rank();
  const int root = ctx->desc().root;
  const int scatter_step = 2 * n - 2;
  ctx->SetStep("scatter", 1, 1);
  if (rank == root) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer == root) continue;
      const int offset = peer - rank;
      const int block = ring.Block(offset);
      ctx->PostChunks(
          peer, ctx->data().subspan(ring.Offset(block), ring.Length(block)),
          Region::kData, ring.Offset(block), scatter_step);
    }
  } else {
    const ChunkPlanner& planner = ctx->planner();
    const size_t chunks = planner.NumChunks(ring.Length(ring.Block(0)));
    for (size_t k = 0; k < chunks; ++k) {
      absl::Status s = ctx->WaitChunk(root, Region::kData, scatter_step, k);
      if (!s.ok()) return s;
    }
  }
  return AllGatherPhase(ctx, ring);
}

}  // namespace collective
}  // namespace starling
