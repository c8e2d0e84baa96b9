// Frame headers of the data-plane wire format (frame_format.md): the
// 48-byte header, its encoding and checked decoding. Thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_FRAME_H_
#define STARLING_SERVER_TRANSPORT_FRAME_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace starling {
namespace transport {

inline constexpr uint32_t kFrameMagic = 0x474C5453;  // "STLG"
// Version 2 retired ACK frames: a write completes when the sender's kernel
// has taken it. Version 3 added the authenticated handshake (CHALLENGE,
// PROOF, WELCOME; frame_format.md). Version 4 added the group epoch to the
// HELLO body: a connection belongs to one group epoch.
inline constexpr uint8_t kProtocolVersion = 4;
inline constexpr size_t kFrameHeaderBytes = 48;
inline constexpr size_t kMaxErrorMessageBytes = 1024;
inline constexpr size_t kHelloBodyBytes = 32;
inline constexpr size_t kChallengeBodyBytes = 40;
inline constexpr size_t kProofBodyBytes = 32;

enum class FrameType : uint8_t {
  kHello = 1,
  kWrite = 2,
  kControl = 3,
  // 4 was ACK in version 1; it is rejected as unknown.
  kGoodbye = 5,
  kError = 6,
  // Handshake only (version 3): see auth.h.
  kChallenge = 7,
  kProof = 8,
  kWelcome = 9,
};

// "WRITE", "HELLO", ...; "type 9" for an unknown value.
const char* FrameTypeName(FrameType type);

struct FrameHeader {
  uint8_t version = kProtocolVersion;
  FrameType type = FrameType::kWrite;
  uint8_t flags = 0;
  // On the stream transports' wire one byte (frame_format.md); the fabric
  // path's slots carry more parts (fabric/slot_header.h).
  uint32_t part_count = 0;
  uint64_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t imm = 0;
  uint32_t seq = 0;
};

// The header of a one-part WRITE frame of `length` bytes into `region` at
// `offset`, with the writer's `imm` and sequence number `seq`.
FrameHeader WriteFrameHeader(uint64_t region, uint64_t offset, uint64_t length,
                             uint32_t imm, uint32_t seq);
// The header of a CONTROL frame of `length` bytes on `tag`.
FrameHeader ControlFrameHeader(uint32_t tag, uint64_t length);

// Writes `header` (with its checksum) into `out`.
void EncodeFrameHeader(const FrameHeader& header,
                       uint8_t (&out)[kFrameHeaderBytes]);

// Decodes and checks a header. DataLoss naming the field for: fewer than
// kFrameHeaderBytes bytes, bad magic, checksum mismatch, unknown type,
// nonzero flags or reserved word, and lengths or part counts the type
// forbids (HELLO not kHelloBodyBytes, CHALLENGE not kChallengeBodyBytes,
// PROOF not kProofBodyBytes, GOODBYE or WELCOME with payload, ERROR above
// kMaxErrorMessageBytes, WRITE with part_count 0). The version is returned,
// not checked: the handshake reports a mismatch with both versions.
absl::StatusOr<FrameHeader> DecodeFrameHeader(absl::Span<const uint8_t> bytes);

// The status code an ERROR frame carries in its imm; kUnknown for 0 (Ok
// means no error) and values absl does not define.
absl::StatusCode ErrorFrameCode(uint32_t imm);

// Little-endian helpers, shared with the HELLO body and tests.
void PutLittleEndian32(uint32_t value, uint8_t* out);
void PutLittleEndian64(uint64_t value, uint8_t* out);
uint32_t GetLittleEndian32(const uint8_t* in);
uint64_t GetLittleEndian64(const uint8_t* in);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FRAME_H_
