#include "server/transport/frame.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace {

using ::testing::HasSubstr;

FrameHeader SampleWrite() {
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.part_count = 3;
  h.region = 0x0123456789ABCDEFull;
  h.offset = 4097;
  h.length = 1u << 30;
  h.imm = 0xDEADBEEF;
  h.seq = 77;
  return h;
}

TEST(Frame, RoundTripsEveryField) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleWrite(), bytes);
  ASSERT_OK_AND_ASSIGN(FrameHeader h, DecodeFrameHeader(bytes));
  EXPECT_EQ(h.version, kProtocolVersion);
  EXPECT_EQ(h.type, FrameType::kWrite);
  EXPECT_EQ(h.part_count, 3);
  EXPECT_EQ(h.region, 0x0123456789ABCDEFull);
  EXPECT_EQ(h.offset, 4097u);
  EXPECT_EQ(h.length, 1u << 30);
  EXPECT_EQ(h.imm, 0xDEADBEEFu);
  EXPECT_EQ(h.seq, 77u);
}

TEST(Frame, IsLittleEndianWithMagicFirst) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleWrite(), bytes);
  EXPECT_EQ(std::memcmp(bytes, "STLG", 4), 0);
  EXPECT_EQ(bytes[8], 0xEF);   // region, low byte first
  EXPECT_EQ(bytes[16], 0x01);  // offset 4097 = 0x1001
  EXPECT_EQ(bytes[17], 0x10);
}

TEST(Frame, TruncatedHeaderIsDataLoss) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleWrite(), bytes);
  EXPECT_THAT(DecodeFrameHeader(absl::MakeConstSpan(bytes, 20)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("truncated: 20 of 48 bytes")));
}

TEST(Frame, EveryFlippedBitIsCaught) {
  uint8_t good[kFrameHeaderBytes];
  EncodeFrameHeader(SampleWrite(), good);
  for (size_t bit = 0; bit < kFrameHeaderBytes * 8; ++bit) {
    uint8_t bad[kFrameHeaderBytes];
    std::memcpy(bad, good, sizeof(bad));
    bad[bit / 8] ^= 1 << (bit % 8);
    EXPECT_THAT(DecodeFrameHeader(bad), StatusIs(absl::StatusCode::kDataLoss))
        << "bit " << bit;
  }
}

TEST(Frame, NamesWhatIsWrong) {
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(SampleWrite(), bytes);
  bytes[0] = 'X';
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("magic")));
  EncodeFrameHeader(SampleWrite(), bytes);
  bytes[30] ^= 0x40;  // inside `length`
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("checksum")));
}

TEST(Frame, RejectsLengthsTheTypeForbids) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader h;
  h.type = FrameType::kGoodbye;
  h.length = 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("GOODBYE")));
  h.type = FrameType::kHello;
  h.length = 5;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("HELLO")));
  h.type = FrameType::kError;
  h.length = kMaxErrorMessageBytes + 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes), StatusIs(absl::StatusCode::kDataLoss));
  h = SampleWrite();
  h.part_count = 0;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("part count")));
  h = SampleWrite();
  h.offset = ~uint64_t{0};
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("overflows")));
  h = SampleWrite();
  h.flags = 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("flags")));
}

TEST(Frame, UnknownTypeIsDataLoss) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader h;
  h.type = static_cast<FrameType>(42);
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("type 42")));
}

TEST(Frame, HandshakeFramesHaveFixedLengths) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader h;
  h.type = FrameType::kChallenge;
  h.length = kChallengeBodyBytes;
  EncodeFrameHeader(h, bytes);
  EXPECT_OK(DecodeFrameHeader(bytes).status());
  h.length = kChallengeBodyBytes + 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("CHALLENGE frame length is 41 bytes")));
  h.type = FrameType::kProof;
  h.length = kProofBodyBytes - 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("PROOF frame length is 31 bytes")));
  h.type = FrameType::kWelcome;
  h.length = 1;
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("WELCOME frame carries 1 payload bytes")));
  h.length = 0;
  EncodeFrameHeader(h, bytes);
  ASSERT_OK_AND_ASSIGN(FrameHeader decoded, DecodeFrameHeader(bytes));
  EXPECT_EQ(decoded.type, FrameType::kWelcome);
  EXPECT_STREQ(FrameTypeName(decoded.type), "WELCOME");
  h.type = static_cast<FrameType>(10);
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("type 10")));
}

TEST(Frame, RetiredAckTypeIsDataLoss) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader h;
  h.type = static_cast<FrameType>(4);
  EncodeFrameHeader(h, bytes);
  EXPECT_THAT(DecodeFrameHeader(bytes),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("type 4 (ACK, retired in version 2)")));
}

}  // namespace
}  // namespace transport
}  // namespace starling
