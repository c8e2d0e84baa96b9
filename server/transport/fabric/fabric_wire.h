// The fabric path's two small formats (little-endian throughout):
//
// The HELLO each rank sends each peer over the stream transport's
// authenticated connection (control tag kFabricHelloTag) once the group has
// formed. It tells the peer whether this rank can use the fabric with it
// and, if so, where to write: this rank's endpoint address and, for that
// peer alone, the base and key of the receive slots it may write into and
// of the credit cell its credits land in.
//
//   magic "SFH1" (4) | version u16 | usable u16 (0/1) | rank u32 | size u32
//   | slot_bytes u32 | slots u32 | recv_base u64 | recv_key u64
//   | credit_base u64 | credit_key u64 | provider_len u16 | provider bytes
//   | host_len u16 | host bytes | text_len u16 | text bytes
//
// `host` names the machine (hostname and kernel boot id): peers with the
// same one may share memory.
//
// `text` is the endpoint address (fi_getname) when usable, else the reason
// the fabric is not usable here ("no provider 'verbs': ..."). Lengths are
// bounded (kMaxProviderBytes, kMaxTextBytes); anything else is refused.
//
// The SLOT HEADER at the start of each receive slot, written with the
// payload by one write-with-immediate: one part of a Write() (frame.h's
// WRITE frame, with 32-bit part counts).
//
//   magic "SFS1" (4) | seq u32 | part_count u32 | imm u32 | region u64
//   | offset u64 | length u64 | reserved u64 (0) | crc32c u32 of the bytes
//   before it | pad to kSlotHeaderBytes
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_WIRE_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {
namespace fabric {

// Control tags of the HELLOs (below the collectives' op tags, 0x8...): one
// for the fabric path, one for the shared-memory path (libfabric's shm
// provider) between daemons on one host.
inline constexpr uint32_t kFabricHelloTag = 0x46414201;
inline constexpr uint32_t kShmHelloTag = 0x46414202;
inline constexpr uint16_t kFabricHelloVersion = 1;
inline constexpr size_t kMaxProviderBytes = 64;
inline constexpr size_t kMaxTextBytes = 512;
inline constexpr size_t kMaxHostBytes = 320;

struct FabricHello {
  bool usable = false;
  uint32_t rank = 0;
  uint32_t size = 0;
  uint32_t slot_bytes = 0;
  uint32_t slots = 0;
  uint64_t recv_base = 0;
  uint64_t recv_key = 0;
  uint64_t credit_base = 0;
  uint64_t credit_key = 0;
  std::string provider;
  std::string host;
  // The endpoint address when usable; the reason it is not, otherwise.
  std::string text;
};

std::vector<std::byte> EncodeFabricHello(const FabricHello& hello);

// DataLoss naming the field for a short or long message, bad magic, another
// version, a length above its bound, or a usable HELLO with no address or
// no slots.
absl::StatusOr<FabricHello> DecodeFabricHello(
    absl::Span<const std::byte> bytes);

inline constexpr size_t kSlotHeaderBytes = 64;

// Writes the slot header of WRITE part `header` into `out`.
void EncodeSlotHeader(const FrameHeader& header, std::byte* out);

// Decodes and checks a slot header read from a slot of `slot_bytes`: DataLoss
// naming the field for bad magic, checksum, a zero part count, or a length
// that does not fit the slot.
absl::StatusOr<FrameHeader> DecodeSlotHeader(const std::byte* in,
                                             size_t slot_bytes);

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_WIRE_H_
