#include "server/transport/frame.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/transport/crc32c.h"

namespace starling {
namespace transport {
namespace {

// Field offsets (frame_format.md).
constexpr size_t kMagicAt = 0;
constexpr size_t kVersionAt = 4;
constexpr size_t kTypeAt = 5;
constexpr size_t kFlagsAt = 6;
constexpr size_t kPartCountAt = 7;
constexpr size_t kRegionAt = 8;
constexpr size_t kOffsetAt = 16;
constexpr size_t kLengthAt = 24;
constexpr size_t kImmAt = 32;
constexpr size_t kSeqAt = 36;
constexpr size_t kReservedAt = 40;
constexpr size_t kCrcAt = 44;

// Type 4 was ACK in protocol version 1.
constexpr uint8_t kRetiredAckType = 4;

}  // namespace

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "HELLO";
    case FrameType::kWrite:
      return "WRITE";
    case FrameType::kControl:
      return "CONTROL";
    case FrameType::kGoodbye:
      return "GOODBYE";
    case FrameType::kError:
      return "ERROR";
    case FrameType::kChallenge:
      return "CHALLENGE";
    case FrameType::kProof:
      return "PROOF";
    case FrameType::kWelcome:
      return "WELCOME";
  }
  return "unknown";
}

absl::StatusCode ErrorFrameCode(uint32_t imm) {
  if (imm == 0 || imm > 16) return absl::StatusCode::kUnknown;
  return static_cast<absl::StatusCode>(imm);
}

void PutLittleEndian32(uint32_t value, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

void PutLittleEndian64(uint64_t value, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t GetLittleEndian32(const uint8_t* in) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | in[i];
  return value;
}

uint64_t GetLittleEndian64(const uint8_t* in) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | in[i];
  return value;
}

FrameHeader WriteFrameHeader(uint64_t region, uint64_t offset, uint64_t length,
                             uint32_t imm, uint32_t seq) {
  FrameHeader header;
  header.type = FrameType::kWrite;
  header.part_count = 1;
  header.region = region;
  header.offset = offset;
  header.length = length;
  header.imm = imm;
  header.seq = seq;
  return header;
}

FrameHeader ControlFrameHeader(uint32_t tag, uint64_t length) {
  FrameHeader header;
  header.type = FrameType::kControl;
  header.imm = tag;
  header.length = length;
  return header;
}

void EncodeFrameHeader(const FrameHeader& header,
                       uint8_t (&out)[kFrameHeaderBytes]) {
  PutLittleEndian32(kFrameMagic, out + kMagicAt);
  out[kVersionAt] = header.version;
  out[kTypeAt] = static_cast<uint8_t>(header.type);
  out[kFlagsAt] = header.flags;
  out[kPartCountAt] = static_cast<uint8_t>(header.part_count);
  PutLittleEndian64(header.region, out + kRegionAt);
  PutLittleEndian64(header.offset, out + kOffsetAt);
  PutLittleEndian64(header.length, out + kLengthAt);
  PutLittleEndian32(header.imm, out + kImmAt);
  PutLittleEndian32(header.seq, out + kSeqAt);
  PutLittleEndian32(0, out + kReservedAt);
  PutLittleEndian32(Crc32c(out, kCrcAt), out + kCrcAt);
}

absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kFrameHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("frame header truncated: ", bytes.size(), " of ",
                     kFrameHeaderBytes, " bytes"));
  }
  const uint8_t* p = bytes.data();
  const uint32_t magic = GetLittleEndian32(p + kMagicAt);
  if (magic != kFrameMagic) {
    return absl::DataLossError(
        absl::StrFormat("frame header has bad magic 0x%08x (expected 0x%08x)",
                        magic, kFrameMagic));
  }
  const uint32_t stored_crc = GetLittleEndian32(p + kCrcAt);
  const uint32_t actual_crc = Crc32c(p, kCrcAt);
  if (stored_crc != actual_crc) {
    return absl::DataLossError(absl::StrFormat(
        "frame header checksum mismatch: stored 0x%08x, computed 0x%08x",
        stored_crc, actual_crc));
  }
  FrameHeader h;
  h.version = p[kVersionAt];
  h.flags = p[kFlagsAt];
  h.part_count = p[kPartCountAt];
  h.region = GetLittleEndian64(p + kRegionAt);
  h.offset = GetLittleEndian64(p + kOffsetAt);
  h.length = GetLittleEndian64(p + kLengthAt);
  h.imm = GetLittleEndian32(p + kImmAt);
  h.seq = GetLittleEndian32(p + kSeqAt);
  const uint8_t type = p[kTypeAt];
  if (type < static_cast<uint8_t>(FrameType::kHello) ||
      type > static_cast<uint8_t>(FrameType::kWelcome) ||
      type == kRetiredAckType) {
    return absl::DataLossError(absl::StrCat(
        "frame header has unknown type ", type,
        type == kRetiredAckType ? " (ACK, retired in version 2)" : ""));
  }
  h.type = static_cast<FrameType>(type);
  const char* name = FrameTypeName(h.type);
  if (h.flags != 0) {
    return absl::DataLossError(
        absl::StrCat(name, " frame has unknown flags ", h.flags));
  }
  const uint32_t reserved = GetLittleEndian32(p + kReservedAt);
  if (reserved != 0) {
    return absl::DataLossError(
        absl::StrCat(name, " frame has nonzero reserved word ", reserved));
  }
  switch (h.type) {
    case FrameType::kHello:
      if (h.length != kHelloBodyBytes) {
        return absl::DataLossError(absl::StrCat("HELLO frame length is ",
                                                h.length, " bytes, expected ",
                                                kHelloBodyBytes));
      }
      break;
    case FrameType::kChallenge:
      if (h.length != kChallengeBodyBytes) {
        return absl::DataLossError(absl::StrCat("CHALLENGE frame length is ",
                                                h.length, " bytes, expected ",
                                                kChallengeBodyBytes));
      }
      break;
    case FrameType::kProof:
      if (h.length != kProofBodyBytes) {
        return absl::DataLossError(absl::StrCat("PROOF frame length is ",
                                                h.length, " bytes, expected ",
                                                kProofBodyBytes));
      }
      break;
    case FrameType::kGoodbye:
    case FrameType::kWelcome:
      if (h.length != 0) {
        return absl::DataLossError(absl::StrCat(
            name, " frame carries ", h.length, " payload bytes, expected 0"));
      }
      break;
    case FrameType::kError:
      if (h.length > kMaxErrorMessageBytes) {
        return absl::DataLossError(absl::StrCat("ERROR frame message is ",
                                                h.length, " bytes, limit ",
                                                kMaxErrorMessageBytes));
      }
      break;
    case FrameType::kWrite:
      if (h.part_count == 0) {
        return absl::DataLossError("WRITE frame has part count 0");
      }
      if (h.offset + h.length < h.offset) {
        return absl::DataLossError(
            absl::StrCat("WRITE frame range overflows: offset ", h.offset,
                         " + length ", h.length));
      }
      break;
    case FrameType::kControl:
      break;
  }
  return h;
}

}  // namespace transport
}  // namespace starling
