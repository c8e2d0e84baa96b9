#include "server/collective/op_descriptor.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace starling {
namespace collective {
namespace {

constexpr uint32_t kMagic = 0x31444353;  // "SCD1" little-endian
constexpr uint32_t kWaitingFlag = 1;

template <typename T>
void Put(std::byte* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[i] = static_cast<std::byte>((static_cast<uint64_t>(value) >> (8 * i)) &
                                    0xFF);
  }
}

template <typename T>
T Get(const std::byte* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<uint64_t>(in[i]) << (8 * i);
  }
  return static_cast<T>(value);
}

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "allreduce";
    case OpKind::kReduceScatter:
      return "reducescatter";
    case OpKind::kAllGather:
      return "allgather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kShift:
      return "shift";
  }
  return "unknown-op";
}

absl::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kButterfly:
      return "butterfly";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kReduceBroadcast:
      return "reduce-broadcast";
  }
  return "unknown-algorithm";
}

std::array<std::byte, OpDescriptor::kWireBytes> OpDescriptor::Encode() const {
  std::array<std::byte, kWireBytes> wire{};
  Put<uint32_t>(&wire[0], kMagic);
  Put<uint64_t>(&wire[4], seq);
  Put<uint64_t>(&wire[12], count);
  Put<uint32_t>(&wire[20], static_cast<uint32_t>(root));
  Put<uint8_t>(&wire[24], static_cast<uint8_t>(kind));
  Put<uint8_t>(&wire[25], static_cast<uint8_t>(algorithm));
  Put<uint8_t>(&wire[26], static_cast<uint8_t>(dtype));
  Put<uint8_t>(&wire[27], static_cast<uint8_t>(op));
  Put<uint32_t>(&wire[28], waiting ? kWaitingFlag : 0u);
  return wire;
}

absl::StatusOr<OpDescriptor> OpDescriptor::Decode(
    absl::Span<const std::byte> wire) {
  if (wire.size() != kWireBytes || Get<uint32_t>(&wire[0]) != kMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed op descriptor of ", wire.size(), " bytes"));
  }
  const uint8_t kind = Get<uint8_t>(&wire[24]);
  const uint8_t algorithm = Get<uint8_t>(&wire[25]);
  const uint8_t dtype = Get<uint8_t>(&wire[26]);
  const uint8_t op = Get<uint8_t>(&wire[27]);
  if (kind < 1 || kind > 6 || algorithm > 4 ||
      dtype > static_cast<uint8_t>(DataType::kInt64) ||
      op > static_cast<uint8_t>(ReduceOp::kProduct)) {
    return absl::InvalidArgumentError(
        absl::StrCat("op descriptor with unknown kind ", kind, ", algorithm ",
                     algorithm, ", dtype ", dtype, " or reduce op ", op));
  }
  OpDescriptor desc;
  desc.seq = Get<uint64_t>(&wire[4]);
  desc.count = Get<uint64_t>(&wire[12]);
  desc.root = static_cast<int32_t>(Get<uint32_t>(&wire[20]));
  desc.kind = static_cast<OpKind>(kind);
  desc.algorithm = static_cast<Algorithm>(algorithm);
  desc.dtype = static_cast<DataType>(dtype);
  desc.op = static_cast<ReduceOp>(op);
  desc.waiting = (Get<uint32_t>(&wire[28]) & kWaitingFlag) != 0;
  return desc;
}

std::optional<uint64_t> OpDescriptor::PeekSeq(
    absl::Span<const std::byte> wire) {
  if (wire.size() != kWireBytes || Get<uint32_t>(&wire[0]) != kMagic) {
    return std::nullopt;
  }
  return Get<uint64_t>(&wire[4]);
}

bool OpDescriptor::Matches(const OpDescriptor& other) const {
  return seq == other.seq && kind == other.kind &&
         algorithm == other.algorithm && dtype == other.dtype &&
         op == other.op && count == other.count && root == other.root;
}

std::string OpDescriptor::ToString() const {
  switch (kind) {
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kAllGather:
      return absl::StrCat("allgather of ", count, " ", DataTypeName(dtype),
                          " (", AlgorithmName(algorithm), ")");
    case OpKind::kBroadcast:
      return absl::StrCat("broadcast of ", count, " ", DataTypeName(dtype),
                          " (root ", root, ", ", AlgorithmName(algorithm), ")");
    case OpKind::kShift:
      return absl::StrCat("shift of ", count / 2, " ", DataTypeName(dtype),
                          " by ", root, " rank(s)");
    default:
      return absl::StrCat(OpKindName(kind), " of ", count, " ",
                          DataTypeName(dtype), " (", ReduceOpName(op), ", ",
                          AlgorithmName(algorithm), ")");
  }
}

}  // namespace collective
}  // namespace starling
