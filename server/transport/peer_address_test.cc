#include "server/transport/peer_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PeerAddress, ToStringJoinsHostAndPort) {
  EXPECT_EQ((PeerAddress{"10.77.0.4", 29503}).ToString(), "10.77.0.4:29503");
  EXPECT_EQ((PeerAddress{"::1", 7000}).ToString(), "[::1]:7000");
}

TEST(ParsePeerList, BareHostsGetBasePortPlusIndex) {
  ASSERT_OK_AND_ASSIGN(auto peers,
                       ParsePeerList("127.0.0.1,127.0.0.1, 10.0.0.3 ", 7000));
  ASSERT_EQ(peers.size(), 3u);
  EXPECT_EQ(peers[0], (PeerAddress{"127.0.0.1", 7000}));
  EXPECT_EQ(peers[1], (PeerAddress{"127.0.0.1", 7001}));
  EXPECT_EQ(peers[2], (PeerAddress{"10.0.0.3", 7002}));
}

TEST(ParsePeerList, ExplicitPortsWinAndMix) {
  ASSERT_OK_AND_ASSIGN(auto peers,
                       ParsePeerList("a:9000,b,[::1]:9002,[fe80::1]", 100));
  ASSERT_EQ(peers.size(), 4u);
  EXPECT_EQ(peers[0], (PeerAddress{"a", 9000}));
  EXPECT_EQ(peers[1], (PeerAddress{"b", 101}));
  EXPECT_EQ(peers[2], (PeerAddress{"::1", 9002}));
  EXPECT_EQ(peers[3], (PeerAddress{"fe80::1", 103}));
}

TEST(ParsePeerList, RejectsEmptyListAndEntries) {
  EXPECT_THAT(ParsePeerList("", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParsePeerList("a,,b", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("entry 1"), HasSubstr("empty entry"))));
  EXPECT_THAT(
      ParsePeerList("a,b,", 7000),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entry 2")));
  EXPECT_THAT(ParsePeerList(":7000", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("entry 0"), HasSubstr("missing host"))));
}

TEST(ParsePeerList, RejectsBadPorts) {
  EXPECT_THAT(ParsePeerList("a:1,b:http", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("entry 1"), HasSubstr("\"b:http\""),
                             HasSubstr("1..65535"))));
  EXPECT_THAT(
      ParsePeerList("a:0", 7000),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("entry 0")));
  EXPECT_THAT(ParsePeerList("a:65536", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      ParsePeerList("a:", 7000),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty port")));
  EXPECT_THAT(ParsePeerList("a,b", 65535),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("entry 1"), HasSubstr("65536"))));
  EXPECT_THAT(
      ParsePeerList("::1:80", 7000),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("brackets")));
}

TEST(ParsePeerList, RejectsDuplicates) {
  EXPECT_THAT(ParsePeerList("h:7001,h", 7000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("entry 1"), HasSubstr("h:7001"),
                             HasSubstr("already listed as entry 0"))));
}

}  // namespace
}  // namespace transport
}  // namespace starling
