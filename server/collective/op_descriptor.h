// OpDescriptor: what one collective call asked for (op kind, algorithm,
// element type, reduce op, element count, root), with the op sequence number
// that orders calls on every rank. Ranks send their descriptor with every
// op (to the peers they exchange data with; see op_context.h) so that
// mismatched calls fail with InvalidArgument naming both ranks and both
// calls, instead of corrupting data or hanging.
//
// Wire form (32 bytes, little-endian): magic "SCD1" u32, seq u64, count u64,
// root i32, kind u8, algorithm u8, dtype u8, reduce op u8, flags u32 (bit 0:
// `waiting`; other bits are ignored on receipt and sent as zero).
// Value type; thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_OP_DESCRIPTOR_H_
#define STARLING_SERVER_COLLECTIVE_OP_DESCRIPTOR_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/collective/data_type.h"

namespace starling {
namespace collective {

enum class OpKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter = 2,
  kAllGather = 3,
  kBroadcast = 4,
  kBarrier = 5,
  // Each rank's block to the rank `root` ahead (shift.h).
  kShift = 6,
};

// kAuto lets the selector choose from the byte size and the group size.
enum class Algorithm : uint8_t {
  kAuto = 0,
  kButterfly = 1,
  kRing = 2,
  kTree = 3,
  kReduceBroadcast = 4,
};

// "allreduce", "reducescatter", "allgather", "broadcast", "barrier",
// "shift".
absl::string_view OpKindName(OpKind kind);
// "auto", "butterfly", "ring", "tree", "reduce-broadcast".
absl::string_view AlgorithmName(Algorithm algorithm);

struct OpDescriptor {
  static constexpr size_t kWireBytes = 32;

  uint64_t seq = 0;
  OpKind kind = OpKind::kAllReduce;
  Algorithm algorithm = Algorithm::kAuto;  // as resolved by the selector
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint64_t count = 0;  // elements
  int32_t root = 0;    // broadcast: the root; shift: the distance
  // Not part of the call: in an arrival notice (op_context.h), the sender
  // has waited past OpContext::kArrivalPollInterval in this op and wants to
  // hear from every peer; a receiver that has not told it yet answers.
  bool waiting = false;

  std::array<std::byte, kWireBytes> Encode() const;
  // InvalidArgument if `wire` is not a descriptor.
  static absl::StatusOr<OpDescriptor> Decode(absl::Span<const std::byte> wire);

  // The sequence number of an encoded descriptor without decoding the rest;
  // nullopt if `wire` is not a descriptor (wrong size or magic).
  static std::optional<uint64_t> PeekSeq(absl::Span<const std::byte> wire);

  // True if two ranks issued the same call (`waiting` is not compared).
  bool Matches(const OpDescriptor& other) const;

  // "allreduce of 1000 float32 (sum, butterfly)".
  std::string ToString() const;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_OP_DESCRIPTOR_H_
