#include "server/transport/fabric/fabric_wire.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/transport/crc32c.h"

namespace starling {
namespace transport {
namespace fabric {
namespace {

constexpr char kHelloMagic[4] = {'S', 'F', 'H', '1'};
constexpr char kSlotMagic[4] = {'S', 'F', 'S', '1'};
// Fixed part of the HELLO, up to the provider's length.
constexpr size_t kHelloFixedBytes = 4 + 2 + 2 + 4 * 4 + 8 * 4;
// Slot header bytes covered by the checksum.
constexpr size_t kSlotCheckedBytes = 4 + 4 * 3 + 8 * 4;

uint8_t* U8(std::byte* p) { return reinterpret_cast<uint8_t*>(p); }
const uint8_t* U8(const std::byte* p) {
  return reinterpret_cast<const uint8_t*>(p);
}

void Put16(uint16_t v, std::vector<std::byte>* out) {
  out->push_back(static_cast<std::byte>(v & 0xff));
  out->push_back(static_cast<std::byte>(v >> 8));
}
void Put32(uint32_t v, std::vector<std::byte>* out) {
  uint8_t b[4];
  PutLittleEndian32(v, b);
  for (uint8_t x : b) out->push_back(static_cast<std::byte>(x));
}
void Put64(uint64_t v, std::vector<std::byte>* out) {
  uint8_t b[8];
  PutLittleEndian64(v, b);
  for (uint8_t x : b) out->push_back(static_cast<std::byte>(x));
}

// Reads fields in order; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(absl::Span<const std::byte> bytes) : bytes_(bytes) {}
  bool Has(size_t n) const { return bytes_.size() - at_ >= n; }
  uint16_t U16() {
    const uint8_t* p = U8(bytes_.data() + at_);
    at_ += 2;
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
  }
  uint32_t U32() {
    uint32_t v = GetLittleEndian32(U8(bytes_.data() + at_));
    at_ += 4;
    return v;
  }
  uint64_t U64() {
    uint64_t v = GetLittleEndian64(U8(bytes_.data() + at_));
    at_ += 8;
    return v;
  }
  std::string Text(size_t n) {
    std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), n);
    at_ += n;
    return s;
  }
  size_t left() const { return bytes_.size() - at_; }

 private:
  absl::Span<const std::byte> bytes_;
  size_t at_ = 0;
};

absl::Status HelloError(const std::string& what) {
  return absl::DataLossError(absl::StrCat("malformed fabric HELLO: ", what));
}

}  // namespace

std::vector<std::byte> EncodeFabricHello(const FabricHello& hello) {
  std::vector<std::byte> out;
  for (char c : kHelloMagic) out.push_back(static_cast<std::byte>(c));
  Put16(kFabricHelloVersion, &out);
  Put16(hello.usable ? 1 : 0, &out);
  Put32(hello.rank, &out);
  Put32(hello.size, &out);
  Put32(hello.slot_bytes, &out);
  Put32(hello.slots, &out);
  Put64(hello.recv_base, &out);
  Put64(hello.recv_key, &out);
  Put64(hello.credit_base, &out);
  Put64(hello.credit_key, &out);
  const std::string provider = hello.provider.substr(0, kMaxProviderBytes);
  const std::string text = hello.text.substr(0, kMaxTextBytes);
  const std::string host = hello.host.substr(0, kMaxHostBytes);
  Put16(static_cast<uint16_t>(provider.size()), &out);
  for (char c : provider) out.push_back(static_cast<std::byte>(c));
  Put16(static_cast<uint16_t>(host.size()), &out);
  for (char c : host) out.push_back(static_cast<std::byte>(c));
  Put16(static_cast<uint16_t>(text.size()), &out);
  for (char c : text) out.push_back(static_cast<std::byte>(c));
  return out;
}

absl::StatusOr<FabricHello> DecodeFabricHello(
    absl::Span<const std::byte> bytes) {
  Reader in(bytes);
  if (!in.Has(kHelloFixedBytes + 6)) {
    return HelloError(absl::StrCat(bytes.size(), " bytes, fewer than the ",
                                   kHelloFixedBytes + 6, " of its fixed part"));
  }
  if (std::memcmp(bytes.data(), kHelloMagic, 4) != 0) {
    return HelloError("bad magic (not a fabric HELLO)");
  }
  in.Text(4);
  const uint16_t version = in.U16();
  if (version != kFabricHelloVersion) {
    return HelloError(absl::StrCat("version ", version, ", this daemon speaks ",
                                   kFabricHelloVersion));
  }
  const uint16_t usable = in.U16();
  if (usable > 1) return HelloError(absl::StrCat("usable flag ", usable));
  FabricHello hello;
  hello.usable = usable == 1;
  hello.rank = in.U32();
  hello.size = in.U32();
  hello.slot_bytes = in.U32();
  hello.slots = in.U32();
  hello.recv_base = in.U64();
  hello.recv_key = in.U64();
  hello.credit_base = in.U64();
  hello.credit_key = in.U64();
  const uint16_t provider_len = in.U16();
  if (provider_len > kMaxProviderBytes || !in.Has(provider_len + 2)) {
    return HelloError(absl::StrCat("provider name of ", provider_len,
                                   " bytes (at most ", kMaxProviderBytes,
                                   ", and within the message)"));
  }
  hello.provider = in.Text(provider_len);
  const uint16_t host_len = in.U16();
  if (host_len > kMaxHostBytes || !in.Has(host_len + 2)) {
    return HelloError(absl::StrCat("host name of ", host_len,
                                   " bytes (at most ", kMaxHostBytes,
                                   ", and within the message)"));
  }
  hello.host = in.Text(host_len);
  const uint16_t text_len = in.U16();
  if (text_len > kMaxTextBytes || in.left() != text_len) {
    return HelloError(absl::StrCat(
        "address or reason of ", text_len, " bytes with ", in.left(),
        " left in the message (at most ", kMaxTextBytes, ")"));
  }
  hello.text = in.Text(text_len);
  if (hello.usable) {
    if (hello.text.empty())
      return HelloError("a usable endpoint without address");
    if (hello.slots == 0 || hello.slots > 65535 ||
        hello.slot_bytes <= kSlotHeaderBytes) {
      return HelloError(
          absl::StrCat(hello.slots, " slots of ", hello.slot_bytes, " bytes"));
    }
  }
  return hello;
}

void EncodeSlotHeader(const FrameHeader& header, std::byte* out) {
  uint8_t* p = U8(out);
  std::memset(p, 0, kSlotHeaderBytes);
  std::memcpy(p, kSlotMagic, 4);
  PutLittleEndian32(header.seq, p + 4);
  PutLittleEndian32(header.part_count, p + 8);
  PutLittleEndian32(header.imm, p + 12);
  PutLittleEndian64(header.region, p + 16);
  PutLittleEndian64(header.offset, p + 24);
  PutLittleEndian64(header.length, p + 32);
  // p + 40: reserved, zero.
  PutLittleEndian32(Crc32c(p, kSlotCheckedBytes), p + kSlotCheckedBytes);
}

absl::StatusOr<FrameHeader> DecodeSlotHeader(const std::byte* in,
                                             size_t slot_bytes) {
  const uint8_t* p = U8(in);
  if (std::memcmp(p, kSlotMagic, 4) != 0) {
    return absl::DataLossError("fabric slot: bad magic");
  }
  if (GetLittleEndian32(p + kSlotCheckedBytes) !=
      Crc32c(p, kSlotCheckedBytes)) {
    return absl::DataLossError("fabric slot: header checksum mismatch");
  }
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.seq = GetLittleEndian32(p + 4);
  h.part_count = GetLittleEndian32(p + 8);
  h.imm = GetLittleEndian32(p + 12);
  h.region = GetLittleEndian64(p + 16);
  h.offset = GetLittleEndian64(p + 24);
  h.length = GetLittleEndian64(p + 32);
  if (GetLittleEndian64(p + 40) != 0) {
    return absl::DataLossError("fabric slot: reserved word is not zero");
  }
  if (h.part_count == 0) {
    return absl::DataLossError("fabric slot: part count 0");
  }
  if (h.length > slot_bytes - kSlotHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("fabric slot: payload of ", h.length,
                     " bytes does not fit a slot of ", slot_bytes));
  }
  return h;
}

}  // namespace fabric
}  // namespace transport
}  // namespace starling
