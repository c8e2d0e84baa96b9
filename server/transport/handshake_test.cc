#include "server/transport/handshake.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Name(int rank) {
  return absl::StrCat("rank ", rank, " (127.0.0.1:", 7000 + rank, ")");
}

Hello MakeHello(uint32_t sender, uint32_t receiver) {
  Hello hello;
  hello.sender_rank = sender;
  hello.receiver_rank = receiver;
  hello.group_size = 4;
  hello.sockets_per_peer = 2;
  hello.socket_index = 1;
  return hello;
}

TEST(Handshake, HelloRoundTrips) {
  uint8_t frame[kHelloFrameBytes];
  EncodeHelloFrame(MakeHello(3, 1), frame);
  ASSERT_OK_AND_ASSIGN(Hello hello, DecodeHelloFrame(frame));
  EXPECT_EQ(hello.version, kProtocolVersion);
  EXPECT_EQ(hello.sender_rank, 3u);
  EXPECT_EQ(hello.receiver_rank, 1u);
  EXPECT_EQ(hello.group_size, 4u);
  EXPECT_EQ(hello.sockets_per_peer, 2u);
  EXPECT_EQ(hello.socket_index, 1u);
}

TEST(Handshake, TheGroupEpochRoundTripsInAllItsBits) {
  Hello sent = MakeHello(3, 1);
  sent.group_epoch = (uint64_t{7} << 32) | 5;  // both halves matter
  uint8_t frame[kHelloFrameBytes];
  EncodeHelloFrame(sent, frame);
  ASSERT_OK_AND_ASSIGN(Hello hello, DecodeHelloFrame(frame));
  EXPECT_EQ(hello.group_epoch, sent.group_epoch);
}

TEST(Handshake, APeerOfAnotherGroupEpochIsRefusedNamingBoth) {
  Hello local = MakeHello(1, 3);
  local.group_epoch = 3;
  Hello stale = MakeHello(3, 1);
  stale.group_epoch = 2;
  EXPECT_THAT(CheckHello(local, stale, -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("group epoch mismatch"),
                             HasSubstr("rank 3 of group epoch 2 reached rank 1 "
                                       "(127.0.0.1:7001) of group epoch 3"),
                             HasSubstr("it belongs to a group the coordinator "
                                       "re-formed since"))));
  // The side behind, reached by the newer group, says so as Unavailable:
  // the newer side dials again until this one has re-formed too.
  EXPECT_THAT(CheckHello(stale, local, 1, Name),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("rank 1 of group epoch 3 reached rank 3 "
                                       "(127.0.0.1:7003) of group epoch 2"),
                             HasSubstr("has not re-formed yet"))));
}

TEST(Handshake, TheEpochIsCheckedBeforeTheRanksOfTheGroup) {
  // After a re-formation a rank of the new group may not exist in the old.
  Hello local = MakeHello(1, 3);
  local.group_epoch = 3;
  local.group_size = 2;
  Hello ahead = MakeHello(4, 1);
  ahead.group_epoch = 4;
  ahead.group_size = 5;
  EXPECT_THAT(CheckHello(local, ahead, -1, Name),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rank 4 of group epoch 4 reached")));
}

TEST(Handshake, CorruptBodyIsDataLoss) {
  uint8_t frame[kHelloFrameBytes];
  EncodeHelloFrame(MakeHello(3, 1), frame);
  frame[kFrameHeaderBytes + 2] ^= 1;
  EXPECT_THAT(DecodeHelloFrame(frame),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("HELLO body")));
  EXPECT_THAT(DecodeHelloFrame(absl::MakeConstSpan(frame, 50)),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(Handshake, AcceptsTheExpectedPeer) {
  EXPECT_OK(CheckHello(MakeHello(1, 3), MakeHello(3, 1), -1, Name));
  EXPECT_OK(CheckHello(MakeHello(3, 1), MakeHello(1, 3), 1, Name));
}

TEST(Handshake, VersionMismatchNamesBothVersionsAndRanks) {
  Hello remote = MakeHello(3, 1);
  remote.version = kProtocolVersion + 1;
  EXPECT_THAT(
      CheckHello(MakeHello(1, 3), remote, -1, Name),
      StatusIs(
          absl::StatusCode::kFailedPrecondition,
          AllOf(
              HasSubstr("protocol version mismatch"),
              HasSubstr(absl::StrCat("rank 3 (127.0.0.1:7003) speaks version ",
                                     kProtocolVersion + 1)),
              HasSubstr(absl::StrCat("rank 1 (127.0.0.1:7001) speaks version ",
                                     kProtocolVersion)))));
}

TEST(Handshake, RefusesUnknownRankAndWrongGroupSize) {
  EXPECT_THAT(CheckHello(MakeHello(1, 3), MakeHello(9, 1), -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("unknown rank 9")));
  Hello remote = MakeHello(3, 1);
  remote.group_size = 5;
  EXPECT_THAT(CheckHello(MakeHello(1, 3), remote, -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("group size mismatch"), HasSubstr("5"),
                             HasSubstr("4"))));
}

TEST(Handshake, RefusesWrongDirectionTargetAndSockets) {
  // Rank 0 may not connect to rank 1: higher ranks connect to lower.
  EXPECT_THAT(CheckHello(MakeHello(1, 0), MakeHello(0, 1), -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("only higher ranks")));
  EXPECT_THAT(CheckHello(MakeHello(1, 3), MakeHello(3, 2), -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("meant to reach rank 2")));
  EXPECT_THAT(CheckHello(MakeHello(3, 1), MakeHello(2, 3), 1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("connected to rank 1")));
  Hello remote = MakeHello(3, 1);
  remote.sockets_per_peer = 1;
  EXPECT_THAT(CheckHello(MakeHello(1, 3), remote, -1, Name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("sockets per peer mismatch")));
}

}  // namespace
}  // namespace transport
}  // namespace starling
