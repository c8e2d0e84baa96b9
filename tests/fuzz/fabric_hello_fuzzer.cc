// libFuzzer harness for the fabric path's two small formats
// (server/transport/fabric/fabric_wire.h): the HELLO a peer sends over the
// stream transport's control channel (DecodeFabricHello) and the slot header
// a peer writes into one of this rank's receive slots (DecodeSlotHeader),
// and their encoders.
//
// Input: byte 0 chooses the setting: bit 0 set, the harness fills in the slot
// header's checksum over the bytes before it (as frame_stream.h does for
// frames), so that mutations reach the checks behind it; bits 1-7 (k) the
// slot's size: kSlotHeaderBytes + 1 for k = 0 (the smallest slot), UINT32_MAX
// for k = 127 (the largest a HELLO can announce), k * 8 KiB otherwise (64 is
// the default 512 KiB). The rest is read four ways:
//   - as a HELLO, as it is;
//   - as a slot header: its first kSlotHeaderBytes, padded with zeros, in a
//     buffer of exactly kSlotHeaderBytes (ASan sees a read past the header);
//   - as the fields of a HELLO and of a slot header to encode.
//
// Besides crashes (ASan, UBSan), the harness checks what the fabric path
// relies on for everything the decoders accept:
//   - a HELLO's strings within their bounds; a usable one with an address,
//     1 to 65535 slots and slots larger than their header (FabricPath
//     computes slot_bytes - kSlotHeaderBytes);
//   - a slot header of a WRITE with part_count > 0 and a payload that fits
//     the slot (length <= slot_bytes - kSlotHeaderBytes: the receiver copies
//     `length` bytes from behind the header);
//   - both formats have one spelling per message (fixed-width fields, lengths
//     that use up the message, a zero reserved word): an accepted message
//     re-encodes to the same bytes, and those decode to the same fields. A
//     decoder that accepted two spellings would be ignoring input bytes.
// And for the encoders: whatever they encode decodes, to the same fields
// (strings cut to their bounds), exactly when it is valid.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/transport/crc32c.h"
#include "server/transport/fabric/fabric_wire.h"
#include "server/transport/frame.h"

namespace starling {
namespace fuzz {
namespace {

using transport::FrameHeader;
using transport::fabric::DecodeFabricHello;
using transport::fabric::DecodeSlotHeader;
using transport::fabric::EncodeFabricHello;
using transport::fabric::EncodeSlotHeader;
using transport::fabric::FabricHello;
using transport::fabric::kMaxHostBytes;
using transport::fabric::kMaxProviderBytes;
using transport::fabric::kMaxTextBytes;
using transport::fabric::kSlotHeaderBytes;

// Bytes of the slot header before its checksum (fabric_wire.h: magic, seq,
// part_count, imm, region, offset, length, reserved), then the checksum's.
constexpr size_t kSlotCheckedBytes = 4 + 4 * 3 + 8 * 4;
constexpr size_t kSlotCrcBytes = 4;

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fabric_hello_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

size_t SlotBytes(uint8_t setting) {
  const size_t k = setting >> 1;
  if (k == 0) return kSlotHeaderBytes + 1;
  if (k == 127) return UINT32_MAX;
  return k << 13;
}

// Reads the fields of a message to encode from the input: little-endian
// integers, zeros past the input's end.
class Fields {
 public:
  explicit Fields(absl::Span<const uint8_t> bytes) : bytes_(bytes) {}
  uint64_t Next(int n) {
    uint64_t value = 0;
    for (int i = 0; i < n; ++i) value |= uint64_t{Byte()} << (8 * i);
    return value;
  }
  // Up to `n` bytes, fewer where the input ends.
  std::string Text(size_t n) {
    n = std::min(n, bytes_.size() - at_);
    std::string text(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return text;
  }

 private:
  uint8_t Byte() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }

  absl::Span<const uint8_t> bytes_;
  size_t at_ = 0;
};

bool SameHello(const FabricHello& a, const FabricHello& b) {
  return a.usable == b.usable && a.rank == b.rank && a.size == b.size &&
         a.slot_bytes == b.slot_bytes && a.slots == b.slots &&
         a.recv_base == b.recv_base && a.recv_key == b.recv_key &&
         a.credit_base == b.credit_base && a.credit_key == b.credit_key &&
         a.provider == b.provider && a.host == b.host && a.text == b.text;
}

bool SameSlotHeader(const FrameHeader& a, const FrameHeader& b) {
  return a.type == b.type && a.seq == b.seq && a.part_count == b.part_count &&
         a.imm == b.imm && a.region == b.region && a.offset == b.offset &&
         a.length == b.length;
}

// What a HELLO the decoder accepts promises the fabric path.
void CheckAcceptedHello(const FabricHello& hello) {
  Check(hello.provider.size() <= kMaxProviderBytes, "provider above its bound");
  Check(hello.host.size() <= kMaxHostBytes, "host above its bound");
  Check(hello.text.size() <= kMaxTextBytes, "text above its bound");
  if (hello.usable) {
    Check(!hello.text.empty(), "a usable HELLO without an address");
    Check(hello.slots > 0 && hello.slots <= 65535,
          "a usable HELLO with 0 or more than 65535 slots");
    Check(hello.slot_bytes > kSlotHeaderBytes,
          "a usable HELLO with slots no larger than their header");
  }
}

// What a slot header the decoder accepts promises the receiver.
void CheckAcceptedSlotHeader(const FrameHeader& header, size_t slot_bytes) {
  Check(header.type == transport::FrameType::kWrite, "a slot not a WRITE");
  Check(header.part_count > 0, "a slot header with part count 0");
  Check(header.length <= slot_bytes - kSlotHeaderBytes,
        "a slot's payload longer than the slot");
}

void FuzzHello(absl::Span<const uint8_t> raw) {
  const absl::Span<const std::byte> bytes(
      reinterpret_cast<const std::byte*>(raw.data()), raw.size());
  absl::StatusOr<FabricHello> hello = DecodeFabricHello(bytes);
  if (!hello.ok()) return;
  CheckAcceptedHello(*hello);
  const std::vector<std::byte> again = EncodeFabricHello(*hello);
  absl::StatusOr<FabricHello> reread = DecodeFabricHello(again);
  Check(reread.ok(), "an accepted HELLO re-encodes to one refused");
  Check(SameHello(*hello, *reread),
        "an accepted HELLO re-encodes to other fields");
  Check(again.size() == bytes.size() &&
            std::memcmp(again.data(), bytes.data(), bytes.size()) == 0,
        "an accepted HELLO re-encodes to other bytes");
}

void FuzzSlotHeader(uint8_t setting, absl::Span<const uint8_t> raw) {
  const size_t slot_bytes = SlotBytes(setting);
  // Exactly the header: the decoder may not read into the payload.
  std::vector<std::byte> slot(kSlotHeaderBytes);
  std::memcpy(slot.data(), raw.data(), std::min(raw.size(), slot.size()));
  if (setting & 1) {
    transport::PutLittleEndian32(
        transport::Crc32c(slot.data(), kSlotCheckedBytes),
        reinterpret_cast<uint8_t*>(slot.data() + kSlotCheckedBytes));
  }
  absl::StatusOr<FrameHeader> header =
      DecodeSlotHeader(slot.data(), slot_bytes);
  if (!header.ok()) return;
  CheckAcceptedSlotHeader(*header, slot_bytes);
  std::vector<std::byte> again(kSlotHeaderBytes);
  EncodeSlotHeader(*header, again.data());
  absl::StatusOr<FrameHeader> reread =
      DecodeSlotHeader(again.data(), slot_bytes);
  Check(reread.ok(), "an accepted slot header re-encodes to one refused");
  Check(SameSlotHeader(*header, *reread),
        "an accepted slot header re-encodes to other fields");
  // The pad after the checksum is not read.
  Check(std::memcmp(again.data(), slot.data(),
                    kSlotCheckedBytes + kSlotCrcBytes) == 0,
        "an accepted slot header re-encodes to other bytes");
}

// The encoders, on fields taken from the input.
void FuzzEncoders(uint8_t setting, absl::Span<const uint8_t> raw) {
  Fields fields(raw);
  FabricHello sent;
  sent.usable = fields.Next(1) & 1;
  sent.rank = fields.Next(4);
  sent.size = fields.Next(4);
  sent.slot_bytes = fields.Next(4);
  sent.slots = fields.Next(4);
  sent.recv_base = fields.Next(8);
  sent.recv_key = fields.Next(8);
  sent.credit_base = fields.Next(8);
  sent.credit_key = fields.Next(8);
  // Lengths up to 64 KiB: the encoder cuts what is above a bound.
  sent.provider = fields.Text(fields.Next(2));
  sent.host = fields.Text(fields.Next(2));
  sent.text = fields.Text(fields.Next(2));
  FabricHello cut = sent;
  cut.provider = cut.provider.substr(0, kMaxProviderBytes);
  cut.host = cut.host.substr(0, kMaxHostBytes);
  cut.text = cut.text.substr(0, kMaxTextBytes);
  const bool valid_hello =
      !cut.usable || (!cut.text.empty() && cut.slots > 0 &&
                      cut.slots <= 65535 && cut.slot_bytes > kSlotHeaderBytes);
  absl::StatusOr<FabricHello> hello =
      DecodeFabricHello(EncodeFabricHello(sent));
  Check(hello.ok() == valid_hello,
        "an encoded HELLO is refused though valid, or accepted though not");
  if (hello.ok()) {
    Check(SameHello(*hello, cut), "an encoded HELLO decodes to other fields");
  }

  const size_t slot_bytes = SlotBytes(setting);
  Fields slot_fields(raw);
  FrameHeader written;
  written.seq = slot_fields.Next(4);
  written.part_count = slot_fields.Next(4);
  written.imm = slot_fields.Next(4);
  written.region = slot_fields.Next(8);
  written.offset = slot_fields.Next(8);
  written.length = slot_fields.Next(8);
  std::vector<std::byte> slot(kSlotHeaderBytes);
  EncodeSlotHeader(written, slot.data());
  const bool valid_header =
      written.part_count > 0 && written.length <= slot_bytes - kSlotHeaderBytes;
  absl::StatusOr<FrameHeader> header =
      DecodeSlotHeader(slot.data(), slot_bytes);
  Check(header.ok() == valid_header,
        "an encoded slot header is refused though valid, or accepted though "
        "not");
  if (header.ok()) {
    Check(SameSlotHeader(*header, written),
          "an encoded slot header decodes to other fields");
  }
}

void FuzzFabricWire(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t setting = data[0];
  const absl::Span<const uint8_t> raw(data + 1, size - 1);
  FuzzHello(raw);
  FuzzSlotHeader(setting, raw);
  FuzzEncoders(setting, raw);
}

}  // namespace
}  // namespace fuzz
}  // namespace starling

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  starling::fuzz::FuzzFabricWire(data, size);
  return 0;
}
