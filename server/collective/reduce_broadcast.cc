#include "server/collective/reduce_broadcast.h"

namespace starling {
namespace collective {
namespace {

// Write immediate steps.
constexpr int kToRootStep = 0;
constexpr int kFromRootStep = 1;

// The root posts everything to every rank; the others wait for it.
absl::Status Distribute(OpContext* ctx, int root) {
  const absl::Span<std::byte> data = ctx->data();
  ctx->SetStep("broadcast", 1, 1);
  if (ctx->rank() == root) {
    for (int peer = 0; peer < ctx->size(); ++peer) {
      if (peer != root) {
        ctx->PostChunks(peer, data, Region::kData, 0, kFromRootStep);
      }
    }
    return absl::OkStatus();
  }
  const size_t chunks = ctx->planner().NumChunks(data.size());
  for (size_t k = 0; k < chunks; ++k) {
    absl::Status s = ctx->WaitChunk(root, Region::kData, kFromRootStep, k);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

size_t ReduceBroadcastScratchBytes(OpKind kind, size_t count,
                                   size_t element_bytes, int size, int rank) {
  if (rank != 0) return 0;
  if (kind != OpKind::kAllReduce && kind != OpKind::kReduceScatter) return 0;
  return static_cast<size_t>(size - 1) * count * element_bytes;
}

// The classic baseline, as MPI_Reduce followed by MPI_Bcast and as a
// driver-centred reduce + broadcast (the Spark study's baseline): the root
// receives and reduces every rank's whole vector, and only then sends the
// result to every rank. Its link carries (N-1) vectors in, then (N-1) out:
// 2(N-1)·bytes/link against the butterfly's 2(N-1)/N·bytes/link, so the
// butterfly should win by ~N. (Overlapping the two phases chunk by chunk
// would use the root's link in both directions at once and halve that; it is
// deliberately not done here, so the baseline stays the one the literature
// measures.)
absl::Status ReduceBroadcastAllReduce(OpContext* ctx) {
  const absl::Span<std::byte> data = ctx->data();
  const size_t n = data.size();
  const int rank = ctx->rank();
  if (rank != 0) {
    ctx->SetStep("reduce", 1, 1);
    ctx->PostChunks(0, data, Region::kScratch, (rank - 1) * n, kToRootStep);
    return Distribute(ctx, 0);
  }
  const ChunkPlanner& planner = ctx->planner();
  const size_t chunks = planner.NumChunks(n);
  ctx->SetStep("reduce", 1, 1);
  for (size_t k = 0; k < chunks; ++k) {
    const Chunk c = planner.Get(n, k);
    const absl::Span<std::byte> piece =
        data.subspan(c.offset_bytes, c.length_bytes);
    for (int peer = 1; peer < ctx->size(); ++peer) {
      absl::Status s =
          ctx->ReduceChunkFromScratch(peer, kToRootStep, peer - 1, k, c);
      if (!s.ok()) return s;
    }
    absl::Status s = ctx->AverageIfNeeded(piece);
    if (!s.ok()) return s;
  }
  return Distribute(ctx, 0);
}

absl::Status ReduceBroadcastReduceScatter(OpContext* ctx) {
  return ReduceBroadcastAllReduce(ctx);
}

absl::Status ReduceBroadcastAllGather(OpContext* ctx) {
  absl::Status gathered = ctx->GatherBlocksToRankZero(kToRootStep);
  if (!gathered.ok()) return gathered;
  return Distribute(ctx, 0);
}

absl::Status ReduceBroadcastBroadcast(OpContext* ctx) {
  return Distribute(ctx, ctx->desc().root);
}

}  // namespace collective
}  // namespace starling
