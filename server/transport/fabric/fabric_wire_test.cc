#include "server/transport/fabric/fabric_wire.h"

#include <cstddef>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace fabric {
namespace {

using ::testing::HasSubstr;

FabricHello Usable() {
  FabricHello hello;
  hello.usable = true;
  hello.rank = 3;
  hello.size = 5;
  hello.slot_bytes = 1 << 19;
  hello.slots = 8;
  hello.recv_base = 0x7f0012345000;
  hello.recv_key = 0x1122334455667788;
  hello.credit_base = 0x7f0000001000;
  hello.credit_key = 42;
  hello.provider = "verbs;ofi_rxm";
  hello.host = "node7/8a1f0c2e-5d4b-4f43-9a7e-0f1e2d3c4b5a";
  hello.text = std::string("\x02\x00\x75\x30\x7f\x00\x00\x01", 8);
  return hello;
}

TEST(FabricHello, RoundTripsEveryField) {
  const FabricHello sent = Usable();
  ASSERT_OK_AND_ASSIGN(FabricHello got,
                       DecodeFabricHello(EncodeFabricHello(sent)));
  EXPECT_TRUE(got.usable);
  EXPECT_EQ(got.rank, 3u);
  EXPECT_EQ(got.size, 5u);
  EXPECT_EQ(got.slot_bytes, sent.slot_bytes);
  EXPECT_EQ(got.slots, 8u);
  EXPECT_EQ(got.recv_base, sent.recv_base);
  EXPECT_EQ(got.recv_key, sent.recv_key);
  EXPECT_EQ(got.credit_base, sent.credit_base);
  EXPECT_EQ(got.credit_key, 42u);
  EXPECT_EQ(got.provider, "verbs;ofi_rxm");
  EXPECT_EQ(got.host, sent.host);
  EXPECT_EQ(got.text, sent.text);
}

TEST(FabricHello, AnUnusableOneCarriesItsReason) {
  FabricHello sent;
  sent.rank = 1;
  sent.size = 2;
  sent.text = "fi_getinfo(verbs) found none";
  ASSERT_OK_AND_ASSIGN(FabricHello got,
                       DecodeFabricHello(EncodeFabricHello(sent)));
  EXPECT_FALSE(got.usable);
  EXPECT_EQ(got.text, "fi_getinfo(verbs) found none");
}

TEST(FabricHello, EveryTruncationIsRefused) {
  const std::vector<std::byte> bytes = EncodeFabricHello(Usable());
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<FabricHello> got =
        DecodeFabricHello(absl::MakeConstSpan(bytes.data(), n));
    EXPECT_FALSE(got.ok()) << n << " bytes";
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_THAT(DecodeFabricHello(longer).status().message(),
              HasSubstr("left in the message"));
}

TEST(FabricHello, BadFieldsAreNamed) {
  std::vector<std::byte> bytes = EncodeFabricHello(Usable());
  std::vector<std::byte> magic = bytes;
  magic[0] = std::byte{'X'};
  EXPECT_THAT(DecodeFabricHello(magic).status().message(),
              HasSubstr("bad magic"));
  std::vector<std::byte> version = bytes;
  version[4] = std::byte{9};
  EXPECT_THAT(DecodeFabricHello(version).status().message(),
              HasSubstr("version 9"));
  FabricHello no_slots = Usable();
  no_slots.slots = 0;
  EXPECT_THAT(DecodeFabricHello(EncodeFabricHello(no_slots)).status().message(),
              HasSubstr("0 slots"));
  FabricHello no_address = Usable();
  no_address.text.clear();
  EXPECT_THAT(
      DecodeFabricHello(EncodeFabricHello(no_address)).status().message(),
      HasSubstr("without address"));
}

TEST(SlotHeader, RoundTripsAndChecksItsChecksum) {
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.region = 77;
  h.offset = 1 << 20;
  h.length = 1000;
  h.imm = 5;
  h.seq = 9;
  h.part_count = 300;  // more than the stream's one byte holds
  std::vector<std::byte> slot(4096);
  EncodeSlotHeader(h, slot.data());
  ASSERT_OK_AND_ASSIGN(FrameHeader got, DecodeSlotHeader(slot.data(), 4096));
  EXPECT_EQ(got.region, 77u);
  EXPECT_EQ(got.offset, uint64_t{1} << 20);
  EXPECT_EQ(got.length, 1000u);
  EXPECT_EQ(got.imm, 5u);
  EXPECT_EQ(got.seq, 9u);
  EXPECT_EQ(got.part_count, 300u);
  for (size_t i = 4; i < 44; ++i) {
    std::vector<std::byte> bad = slot;
    bad[i] ^= std::byte{1};
    EXPECT_THAT(DecodeSlotHeader(bad.data(), 4096).status().message(),
                HasSubstr("checksum"))
        << "byte " << i;
  }
  EXPECT_THAT(DecodeSlotHeader(slot.data(), 1000).status().message(),
              HasSubstr("does not fit a slot of 1000"));
}

}  // namespace
}  // namespace fabric
}  // namespace transport
}  // namespace starling
