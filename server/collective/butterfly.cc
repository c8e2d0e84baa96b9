#include "server/collective/butterfly.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "server/collective/shard_layout.h"

namespace starling {
namespace collective {
namespace {

// Shape of the butterfly on a group of `size` ranks.
//
// The P = 2^L "active" ranks exchange over L steps. Their unit of work is a
// slot: slot s stands for ShardLayout block s plus, when s < extras, block
// P + s (the block of s's extra rank). A range of slots [a, b) is therefore
// at most two contiguous byte ranges of the data: blocks [a, b) and blocks
// [P + a, P + min(b, extras)). Recursive halving leaves slot r, i.e. blocks r
// and P + r, on active rank r.
//
// Scratch (reduce-scatter only) holds, at offset 0, the extra's whole vector
// for folding (n bytes, if any rank folds), then one area per halving step so
// that a partner that runs ahead never overwrites data still being reduced.
// Area sizes are the largest half any rank keeps at that step, so every rank
// computes the same offsets.
class Geometry {
 public:
  // A vector of `count` elements at byte `data_base` of the data, its
  // writes' steps numbered from `step_base` (a segment of a pipelined
  // all-reduce; 0 and 0 for the whole vector).
  Geometry(size_t count, size_t element_bytes, int size, size_t data_base = 0,
           int step_base = 0)
      : size_(size),
        active_(LargestPowerOfTwo(size)),
        extras_(size - active_),
        levels_(Log2(active_)),
        element_bytes_(element_bytes),
        data_base_(data_base),
        step_base_(step_base),
        layout_(count, size) {}

  struct Ranges {
    size_t offset1 = 0, length1 = 0;  // blocks [a, b)
    size_t offset2 = 0, length2 = 0;  // blocks [P + a, P + min(b, extras))
  };

  // Byte offsets in the data (data_base included).
  Ranges Slots(int a, int b) const {
    Ranges r;
    r.offset1 = data_base_ + Bytes(a);
    r.length1 = Bytes(b) - Bytes(a);
    if (a < extras_) {
      r.offset2 = data_base_ + Bytes(active_ + a);
      r.length2 = Bytes(active_ + std::min(b, extras_)) - Bytes(active_ + a);
    }
    return r;
  }

  size_t VectorBytes() const { return layout_.count() * element_bytes_; }

  size_t FoldBytes() const {
    return extras_ > 0 ? layout_.count() * element_bytes_ : 0;
  }

  // Largest kept half at halving step j (0-based) over all active ranks.
  size_t MaxKeptBytes(int j) const {
    const int span = active_ >> (j + 1);
    size_t most = 0;
    for (int a = 0; a < active_; a += span) {
      const Ranges r = Slots(a, a + span);
      most = std::max(most, r.length1 + r.length2);
    }
    return most;
  }

  // The halving's receive areas, one per step.
  size_t HalvingScratchBytes() const {
    size_t total = 0;
    for (int j = 0; j < levels_; ++j) total += MaxKeptBytes(j);
    return total;
  }

  size_t ScratchBytes() const { return FoldBytes() + HalvingScratchBytes(); }

  int size() const { return size_; }
  int active() const { return active_; }
  int extras() const { return extras_; }
  int levels() const { return levels_; }
  const ShardLayout& layout() const { return layout_; }
  size_t Bytes(int block) const {
    return layout_.Begin(block) * element_bytes_;
  }

  // Write immediate steps: fold-in 0, halving 1..L, doubling L+1..2L,
  // fold-out 2L+1, broadcast scatter 2L+2.
  int HalvingStep(int j) const { return step_base_ + 1 + j; }
  int DoublingStep(int j) const { return step_base_ + 1 + levels_ + j; }
  int FoldOutStep() const { return 1 + 2 * levels_; }
  int ScatterStep() const { return 2 + 2 * levels_; }

 private:
  static int LargestPowerOfTwo(int n) {
    int p = 1;
    while (p * 2 <= n) p *= 2;
    return p;
  }
  static int Log2(int p) {
    int l = 0;
    while ((1 << l) < p) ++l;
    return l;
  }

  int size_;
  int active_;
  int extras_;
  int levels_;
  size_t element_bytes_;
  size_t data_base_;
  int step_base_;
  ShardLayout layout_;
};

constexpr int kFoldInStep = 0;

// The all-reduce's pipeline (PipelinedHalvingDoubling): segments of at
// least this many bytes, at most this many. Finer segments shorten the
// pipeline's fill and drain (the first segment's steps, the last one's):
// with the TCP send buffer capped (tcp_options.h), 64 segments of >= 64 KiB
// against 8 of >= 512 KiB took the butterfly at 8 hosts from 1.065x the
// ring to 1.016x at 1e7 floats and left 1e6 within the noise (1.06-1.07x);
// at 4 hosts 1e7 1.02x -> 1.00x (tests/bench/RESULTS.md run 10).
constexpr size_t kButterflySegmentBytes = 64 * 1024;
constexpr size_t kButterflyMaxSegments = 64;

absl::Status WaitRanges(OpContext* ctx, int peer, const Geometry::Ranges& r,
                        int step) {
  auto ignore = [](const Chunk&) { return absl::OkStatus(); };
  absl::Status s =
      ctx->ReceiveChunks(peer, Region::kData, r.length1, step, 0, ignore);
  if (!s.ok()) return s;
  return ctx->ReceiveChunks(peer, Region::kData, r.length2, step,
                            ctx->planner().NumChunks(r.length1), ignore);
}

void PostRanges(OpContext* ctx, int peer, const Geometry::Ranges& r, Region dst,
                size_t dst_offset1, size_t dst_offset2, int step) {
  const absl::Span<std::byte> data = ctx->data();
  ctx->PostChunks(peer, data.subspan(r.offset1, r.length1), dst, dst_offset1,
                  step, 0);
  ctx->PostChunks(peer, data.subspan(r.offset2, r.length2), dst, dst_offset2,
                  step, ctx->planner().NumChunks(r.length1));
}

// Extras hand their whole vector to their partner, which reduces it in.
absl::Status FoldInReduce(OpContext* ctx, const Geometry& g) {
  const int rank = ctx->rank();
  const absl::Span<std::byte> data = ctx->data();
  ctx->SetStep("fold-in", 1, 1);
  if (rank >= g.active()) {
    ctx->PostChunks(rank - g.active(), data, Region::kScratch, 0, kFoldInStep);
    return absl::OkStatus();
  }
  if (rank >= g.extras()) return absl::OkStatus();
  const absl::Span<std::byte> scratch = ctx->scratch();
  return ctx->ReceiveChunks(
      rank + g.active(), Region::kScratch, data.size(), kFoldInStep, 0,
      [&](const Chunk& c) {
        return ctx->ReduceInto(data.subspan(c.offset_bytes, c.length_bytes),
                               scratch.subspan(c.offset_bytes, c.length_bytes));
      });
}

// Extras hand their own block to their partner (all-gather).
absl::Status FoldInBlock(OpContext* ctx, const Geometry& g) {
  const int rank = ctx->rank();
  ctx->SetStep("fold-in", 1, 1);
  Geometry::Ranges block;
  if (rank >= g.active()) {
    block.offset1 = g.Bytes(rank);
    block.length1 = g.Bytes(rank + 1) - block.offset1;
    PostRanges(ctx, rank - g.active(), block, Region::kData, block.offset1, 0,
               kFoldInStep);
    return absl::OkStatus();
  }
  if (rank >= g.extras()) return absl::OkStatus();
  const int extra = rank + g.active();
  block.length1 = g.Bytes(extra + 1) - g.Bytes(extra);
  return WaitRanges(ctx, extra, block, kFoldInStep);
}

// Partners hand their extra the whole result, or only its block.
absl::Status FoldOut(OpContext* ctx, const Geometry& g, bool whole) {
  const int rank = ctx->rank();
  ctx->SetStep("fold-out", 1, 1);
  Geometry::Ranges range;
  // An active rank past the extras has no extra to hand anything to.
  if (rank < g.active() && rank >= g.extras()) return absl::OkStatus();
  const int extra = rank >= g.active() ? rank : rank + g.active();
  if (whole) {
    range.length1 = ctx->data().size();
  } else {
    range.offset1 = g.Bytes(extra);
    range.length1 = g.Bytes(extra + 1) - range.offset1;
  }
  if (rank >= g.active()) {
    range.offset1 = 0;  // the receiver's chunking is over the length only
    return WaitRanges(ctx, rank - g.active(), range, g.FoldOutStep());
  }
  PostRanges(ctx, extra, range, Region::kData, range.offset1, 0,
             g.FoldOutStep());
  return absl::OkStatus();
}

bool UsesDoubling(OpKind kind, size_t bytes, size_t doubling_max_bytes) {
  return kind == OpKind::kAllReduce && bytes <= doubling_max_bytes;
}

// Recursive doubling's scratch, after the fold area: one receive area per
// step (a partner may run a step ahead of us), then two accumulators that
// alternate, so a vector still being sent is never overwritten.
size_t DoublingScratchBytes(const Geometry& g) {
  return g.FoldBytes() + (g.levels() + 2) * g.VectorBytes();
}

// Step j: send the running sum to partner rank ^ 2^j, add the partner's.
// The sum lives in `data` at first, then alternates between the two
// accumulators; the last step writes it back into `data`.
absl::Status WholeVectorDoubling(OpContext* ctx, const Geometry& g) {
  const int rank = ctx->rank();
  if (rank >= g.active()) return absl::OkStatus();
  const size_t n = g.VectorBytes();
  const absl::Span<std::byte> data = ctx->data();
  const absl::Span<std::byte> scratch = ctx->scratch();
  const size_t receive_base = g.FoldBytes();
  const size_t accumulator_base = receive_base + g.levels() * n;
  absl::Span<std::byte> sum = data;
  int data_sent_to = -1;  // the partner `data` itself was sent to
  for (int j = 0; j < g.levels(); ++j) {
    ctx->SetStep("recursive doubling", j + 1, g.levels());
    const int partner = rank ^ (1 << j);
    const size_t receive_at = receive_base + j * n;
    ctx->PostChunks(partner, sum, Region::kScratch, receive_at,
                    g.HalvingStep(j));
    if (sum.data() == data.data()) data_sent_to = partner;
    const bool last = j + 1 == g.levels();
    absl::Span<std::byte> next =
        last ? data : scratch.subspan(accumulator_base + (j % 2) * n, n);
    // `next` held the sum sent in step j-1 (or is `data`, sent in step 0):
    // those writes must have left it before it is overwritten.
    if (last && data_sent_to >= 0) {
      absl::Status s = ctx->AwaitWritesTo(data_sent_to);
      if (!s.ok()) return s;
    } else if (!last && j >= 2) {
      absl::Status s = ctx->AwaitWritesTo(rank ^ (1 << (j - 1)));
      if (!s.ok()) return s;
    }
    const absl::Span<const std::byte> in = scratch.subspan(receive_at, n);
    absl::Status s = ctx->ReceiveChunks(
        partner, Region::kScratch, n, g.HalvingStep(j), 0, [&](const Chunk& c) {
          if (next.data() != sum.data()) {
            std::memcpy(next.data() + c.offset_bytes,
                        sum.data() + c.offset_bytes, c.length_bytes);
          }
          return ctx->ReduceInto(next.subspan(c.offset_bytes, c.length_bytes),
                                 in.subspan(c.offset_bytes, c.length_bytes));
        });
    if (!s.ok()) return s;
    sum = next;
  }
  return ctx->AverageIfNeeded(data);
}

// One butterfly over a vector (or a segment of one: Geometry), as steps
// that can be interleaved with another's: PostHalving(j) sends halving
// step j's range, ReceiveHalving(j) waits for the partner's and reduces it,
// then moves to step j + 1 (L steps: the reduce-scatter); StartDoubling,
// PostDoubling(j) and ReceiveDoubling(j) do the same for the doubling (L
// steps: the all-gather), taking the partner's range. Only the active
// ranks call them.
class Butterfly {
 public:
  // `area` is where the halving's receive areas begin in the scratch.
  Butterfly(OpContext* ctx, const Geometry& g, size_t area)
      : ctx_(ctx), g_(g), area_(area), lo_(0), hi_(g.active()) {}

  void PostHalving(int j) {
    const int partner = HalvingPartner(j);
    const Geometry::Ranges send =
        upper(j) ? g_.Slots(lo_, Mid()) : g_.Slots(Mid(), hi_);
    PostRanges(ctx_, partner, send, Region::kScratch, area_,
               area_ + send.length1, g_.HalvingStep(j));
  }

  // The partner's half reduced into the one kept; after the last step the
  // rank's own slot is reduced (and averaged, for kAverage).
  absl::Status ReceiveHalving(int j) {
    const int partner = HalvingPartner(j);
    const bool up = upper(j);
    const int mid = Mid();
    const Geometry::Ranges keep = up ? g_.Slots(mid, hi_) : g_.Slots(lo_, mid);
    const absl::Span<std::byte> data = ctx_->data();
    const absl::Span<std::byte> scratch = ctx_->scratch();
    auto reduce_at = [&](size_t data_offset, size_t scratch_offset) {
      return [&, data_offset, scratch_offset](const Chunk& c) {
        return ctx_->ReduceInto(
            data.subspan(data_offset + c.offset_bytes, c.length_bytes),
            scratch.subspan(scratch_offset + c.offset_bytes, c.length_bytes));
      };
    };
    absl::Status s = ctx_->ReceiveChunks(partner, Region::kScratch,
                                         keep.length1, g_.HalvingStep(j), 0,
                                         reduce_at(keep.offset1, area_));
    if (!s.ok()) return s;
    s = ctx_->ReceiveChunks(partner, Region::kScratch, keep.length2,
                            g_.HalvingStep(j),
                            ctx_->planner().NumChunks(keep.length1),
                            reduce_at(keep.offset2, area_ + keep.length1));
    if (!s.ok()) return s;
    area_ += g_.MaxKeptBytes(j);
    if (up) {
      lo_ = mid;
    } else {
      hi_ = mid;
    }
    if (j + 1 < g_.levels()) return absl::OkStatus();
    const Geometry::Ranges mine = g_.Slots(ctx_->rank(), ctx_->rank() + 1);
    s = ctx_->AverageIfNeeded(data.subspan(mine.offset1, mine.length1));
    if (!s.ok()) return s;
    return ctx_->AverageIfNeeded(data.subspan(mine.offset2, mine.length2));
  }

  // Doubling from slot `rank` alone (after the halving, or for an
  // all-gather).
  void StartDoubling() {
    lo_ = ctx_->rank();
    hi_ = lo_ + 1;
  }

  void PostDoubling(int j) {
    const Geometry::Ranges mine = g_.Slots(lo_, hi_);
    PostRanges(ctx_, DoublingPartner(j), mine, Region::kData, mine.offset1,
               mine.offset2, g_.DoublingStep(j));
  }

  absl::Status ReceiveDoubling(int j) {
    const int mask = 1 << j;
    const int span = hi_ - lo_;
    const int their_lo = (ctx_->rank() & mask) ? lo_ - span : hi_;
    absl::Status s =
        WaitRanges(ctx_, DoublingPartner(j),
                   g_.Slots(their_lo, their_lo + span), g_.DoublingStep(j));
    if (!s.ok()) return s;
    lo_ = std::min(lo_, their_lo);
    hi_ = std::max(hi_, their_lo + span);
    return absl::OkStatus();
  }

  // The rank exchanged with at halving step j, and at doubling step j.
  int HalvingPartner(int j) const {
    return ctx_->rank() ^ (g_.active() >> (j + 1));
  }
  int DoublingPartner(int j) const { return ctx_->rank() ^ (1 << j); }

 private:
  bool upper(int j) const {
    return (ctx_->rank() & (g_.active() >> (j + 1))) != 0;
  }
  int Mid() const { return lo_ + (hi_ - lo_) / 2; }

  OpContext* ctx_;
  Geometry g_;
  size_t area_;
  int lo_;
  int hi_;
};

// Recursive halving among the active ranks; leaves slot `rank` reduced (and
// averaged, for kAverage).
absl::Status Halving(OpContext* ctx, const Geometry& g) {
  if (ctx->rank() >= g.active()) return absl::OkStatus();
  Butterfly b(ctx, g, g.FoldBytes());
  for (int j = 0; j < g.levels(); ++j) {
    ctx->SetStep("reduce-scatter", j + 1, g.levels());
    b.PostHalving(j);
    absl::Status s = b.ReceiveHalving(j);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Recursive doubling among the active ranks, from slot `rank` to all slots.
absl::Status Doubling(OpContext* ctx, const Geometry& g) {
  if (ctx->rank() >= g.active()) return absl::OkStatus();
  Butterfly b(ctx, g, 0);
  b.StartDoubling();
  for (int j = 0; j < g.levels(); ++j) {
    ctx->SetStep("all-gather", j + 1, g.levels());
    b.PostDoubling(j);
    absl::Status s = b.ReceiveDoubling(j);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// The segments of `whole`: at most kButterflyMaxSegments of at least
// kButterflySegmentBytes (one below that), elements ShardLayout(count, S),
// each its own write steps after the whole vector's.
std::vector<Geometry> Segments(const Geometry& whole, size_t element_bytes) {
  const size_t segments =
      whole.levels() == 0
          ? 1
          : std::clamp<size_t>(whole.VectorBytes() / kButterflySegmentBytes, 1,
                               kButterflyMaxSegments);
  const ShardLayout cut(whole.layout().count(), segments);
  std::vector<Geometry> out;
  out.reserve(segments);
  for (size_t s = 0; s < segments; ++s) {
    out.emplace_back(cut.Size(s), element_bytes, whole.size(),
                     cut.Begin(s) * element_bytes,
                     static_cast<int>((s + 1) * (2 * whole.levels() + 3)));
  }
  return out;
}

size_t PipelinedScratchBytes(const Geometry& whole, size_t element_bytes) {
  size_t total = whole.FoldBytes();
  for (const Geometry& g : Segments(whole, element_bytes)) {
    total += g.HalvingScratchBytes();
  }
  return total;
}

// The all-reduce's halving and doubling, pipelined over segments: the
// vector is cut into S segments, each its own butterfly (its own scratch
// areas and write steps), and the ranks walk the 2L steps segment by
// segment: segment s's step j + 1 leaves as soon as its step j is
// reduced, while the later segments' step j still arrives. So the links
// to the next step's partner carry data while the current step's tail is
// still in flight, instead of idling from one step's last chunk to the
// next step's first.
absl::Status PipelinedHalvingDoubling(OpContext* ctx, const Geometry& whole) {
  if (ctx->rank() >= whole.active() || whole.levels() == 0) {
    return absl::OkStatus();
  }
  std::vector<Butterfly> flies;
  size_t area = whole.FoldBytes();
  for (const Geometry& g : Segments(whole, ctx->element_bytes())) {
    flies.emplace_back(ctx, g, area);
    area += g.HalvingScratchBytes();
  }
  const int levels = whole.levels();
  const auto post = [&](Butterfly& b, int step) {
    if (step < levels) {
      b.PostHalving(step);
    } else {
      if (step == levels) b.StartDoubling();
      b.PostDoubling(step - levels);
    }
  };
  for (Butterfly& b : flies) post(b, 0);
  // Paced: a segment's step j + 1 is posted only once this rank's writes of
  // step j have all left their buffers (handed to the kernel, for TCP);
  // until then the reduced segments wait, in order, in `deferred`. So a
  // rank feeds one partner's stream at a time, as the ring does, and the
  // next step's data queue behind the current step's instead of sharing
  // the port with it. Posted at once, the two streams at every step
  // boundary made the butterfly 1.2-1.35x the ring on 8 hosts at 1e7
  // floats; paced, 1.1x (tests/bench/RESULTS.md, run 7).
  std::vector<Butterfly*> deferred;
  const auto post_deferred = [&](int step) {
    for (Butterfly* d : deferred) post(*d, step);
    deferred.clear();
  };
  for (int step = 0; step < 2 * levels; ++step) {
    const bool halving = step < levels;
    ctx->SetStep(halving ? "reduce-scatter" : "all-gather",
                 (halving ? step : step - levels) + 1, levels);
    const int sending_to = halving
                               ? flies.front().HalvingPartner(step)
                               : flies.front().DoublingPartner(step - levels);
    const bool last = step + 1 == 2 * levels;
    for (Butterfly& b : flies) {
      absl::Status s =
          halving ? b.ReceiveHalving(step) : b.ReceiveDoubling(step - levels);
      if (!s.ok()) return s;
      if (last) continue;
      if (ctx->WritesPendingTo(sending_to)) {
        deferred.push_back(&b);
      } else {
        post_deferred(step + 1);
        post(b, step + 1);
      }
    }
    if (!deferred.empty()) {
      absl::Status s = ctx->AwaitWritesTo(sending_to);
      if (!s.ok()) return s;
      post_deferred(step + 1);
    }
  }
  return absl::OkStatus();
}

Geometry MakeGeometry(const OpContext& ctx) {
  return Geometry(ctx.desc().count, ctx.element_bytes(), ctx.size());
}

absl::Status AllGatherWith(OpContext* ctx, const Geometry& g) {
  absl::Status s = FoldInBlock(ctx, g);
  if (!s.ok()) return s;
  s = Doubling(ctx, g);
  if (!s.ok()) return s;
  return FoldOut(ctx, g, /*whole=*/true);
}

}  // namespace

size_t ButterflyScratchBytes(OpKind kind, size_t count, size_t element_bytes,
                             int size, size_t doubling_max_bytes) {
  if (kind != OpKind::kAllReduce && kind != OpKind::kReduceScatter) return 0;
  const Geometry g(count, element_bytes, size);
  if (UsesDoubling(kind, count * element_bytes, doubling_max_bytes)) {
    return DoublingScratchBytes(g);
  }
  if (kind == OpKind::kAllReduce) {
    return PipelinedScratchBytes(g, element_bytes);
  }
  return g.ScratchBytes();
}

absl::Status ButterflyAllReduce(OpContext* ctx) {
  const Geometry g = MakeGeometry(*ctx);
  absl::Status s = FoldInReduce(ctx, g);
  if (!s.ok()) return s;
  if (UsesDoubling(OpKind::kAllReduce, ctx->data().size(),
                   ctx->doubling_max_bytes())) {
    s = WholeVectorDoubling(ctx, g);
    if (!s.ok()) return s;
    return FoldOut(ctx, g, /*whole=*/true);
  }
  s = PipelinedHalvingDoubling(ctx, g);
  if (!s.ok()) return s;
  return FoldOut(ctx, g, /*whole=*/true);
}

absl::Status ButterflyReduceScatter(OpContext* ctx) {
  const Geometry g = MakeGeometry(*ctx);
  absl::Status s = FoldInReduce(ctx, g);
  if (!s.ok()) return s;
  s = Halving(ctx, g);
  if (!s.ok()) return s;
  return FoldOut(ctx, g, /*whole=*/false);
}

absl::Status ButterflyAllGather(OpContext* ctx) {
  return AllGatherWith(ctx, MakeGeometry(*ctx));
}

absl::Status ButterflyBroadcast(OpContext* ctx) {
  const Geometry g = MakeGeometry(*ctx);
  const int rank = ctx->rank();
  const int root = ctx->desc().root;
  ctx->SetStep("scatter", 1, 1);
  if (rank == root) {
    for (int peer = 0; peer < ctx->size(); ++peer) {
      if (peer == root) continue;
      Geometry::Ranges block;
      block.offset1 = g.Bytes(peer);
      block.length1 = g.Bytes(peer + 1) - block.offset1;
      PostRanges(ctx, peer, block, Region::kData, block.offset1, 0,
                 g.ScatterStep());
    }
  } else {
    Geometry::Ranges block;
    block.length1 = g.Bytes(rank + 1) - g.Bytes(rank);
    absl::Status s = WaitRanges(ctx, root, block, g.ScatterStep());
    if (!s.ok()) return s;
  }
  return AllGatherWith(ctx, g);
}

}  // namespace collective
}  // namespace starling
