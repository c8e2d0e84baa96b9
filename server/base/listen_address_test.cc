#include "server/base/listen_address.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace {

using ::testing::HasSubstr;

// Only addresses no other machine can reach count as loopback: what decides
// whether a control-plane service without a credential may listen there.
TEST(ListenAddress, LoopbackHostsAreOnlyThisMachines) {
  for (const char* host :
       {"localhost", "LocalHost", "127.0.0.1", "127.3.2.1", "::1", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "10.0.0.1", "128.0.0.1", "::", "[::]",
                           "node-a", "", "127.0.0.1.example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ListenAddress, ParsesHostAndPort) {
  ASSERT_OK_AND_ASSIGN(HostPort v4, ParseHostPort("0.0.0.0:29400"));
  EXPECT_EQ(v4.host, "0.0.0.0");
  EXPECT_EQ(v4.port, 29400);
  ASSERT_OK_AND_ASSIGN(HostPort v6, ParseHostPort("[::1]:80"));
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 80);
}

TEST(ListenAddress, RefusesMalformedAddresses) {
  for (const char* bad :
       {"29400", ":29400", "host:", "host:http", "host:70000", "host:-1"}) {
    EXPECT_THAT(ParseHostPort(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(bad)))
        << bad;
  }
}

TEST(ListenAddress, RefusesHostsThatAreNotHostNames) {
  for (const char* bad : {"not a host!!:80", "[]:80", "a/b:80", "[zz::1]:80"}) {
    EXPECT_THAT(ParseHostPort(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("has no valid host")))
        << bad;
  }
  ASSERT_OK_AND_ASSIGN(HostPort named, ParseHostPort("node-7.cluster_a:1"));
  EXPECT_EQ(named.host, "node-7.cluster_a");
}

TEST(ListenAddress, ProbeSeesAPortInUse) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  EXPECT_THAT(CheckCanListen({"127.0.0.1", port}),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("cannot listen on 127.0.0.1:", port,
                                    ": Address already in use")));
  ::close(fd);
  EXPECT_OK(CheckCanListen({"127.0.0.1", port}));
}

}  // namespace
}  // namespace starling
