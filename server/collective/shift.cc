#include "server/collective/shift.h"

#include <cstring>

namespace starling {
namespace collective {

absl::Status ShiftExchange(OpContext* ctx) {
  const int n = ctx->size();
  const absl::Span<std::byte> data = ctx->data();
  const size_t half = data.size() / 2;
  const absl::Span<std::byte> outgoing = data.first(half);
  const absl::Span<std::byte> incoming = data.subspan(half, half);
  if (n == 1) {
    if (half > 0) std::memcpy(incoming.data(), outgoing.data(), half);
    return absl::OkStatus();
  }
  const int distance = ctx->desc().root;
  const int to = (ctx->rank() + distance) % n;
  const int from = (ctx->rank() - distance + n) % n;
  ctx->SetStep("shift", 1, 1);
  ctx->PostChunks(to, outgoing, Region::kData, half, /*step=*/0);
  const size_t chunks = ctx->planner().NumChunks(half);
  for (size_t k = 0; k < chunks; ++k) {
    const absl::Status status = ctx->WaitChunk(from, Region::kData, 0, k);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace starling
