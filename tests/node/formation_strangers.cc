#include "tests/node/formation_strangers.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"

namespace starling {
namespace testing_node {

Stranger::Stranger(int port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval wait = {10, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  connected_ =
      ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

Stranger::~Stranger() { ::close(fd_); }

bool Stranger::Send(const std::vector<uint8_t>& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += n;
  }
  return true;
}

bool Stranger::Receive(size_t n, std::vector<uint8_t>* bytes) {
  bytes->resize(n);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd_, bytes->data() + got, n - got, 0);
    if (r <= 0) return false;
    got += r;
  }
  return true;
}

// HELLO (claiming rank `rank` of `group_size`, to `receiver`) and
// CHALLENGE in `mode`, as a real rank opens a connection
// (server/transport/frame_format.md, "Handshake").
std::vector<uint8_t> ForgedOpening(int rank, int receiver, int group_size,
                                   transport::AuthMode mode,
                                   transport::Transcript* transcript) {
  transport::Hello hello;
  hello.sender_rank = rank;
  hello.group_size = group_size;
  hello.receiver_rank = receiver;
  hello.socket_index = 0;
  hello.sockets_per_peer = 1;
  // The epoch is no secret: a forger names the first group's, as the real
  // ranks do, so that what is judged is the rest of its opening.
  hello.group_epoch = 1;
  uint8_t hello_frame[transport::kHelloFrameBytes];
  transport::EncodeHelloFrame(hello, hello_frame);
  transport::Challenge challenge;
  challenge.mode = mode;
  for (size_t i = 0; i < challenge.nonce.size(); ++i) {
    challenge.nonce[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  uint8_t challenge_frame[transport::kChallengeFrameBytes];
  transport::EncodeChallengeFrame(challenge, challenge_frame);
  if (transcript != nullptr) {
    std::copy(hello_frame + transport::kFrameHeaderBytes,
              hello_frame + transport::kHelloFrameBytes,
              transcript->connect_hello.begin());
    transcript->connect_nonce = challenge.nonce;
  }
  // One allocation of the final size: gcc 12 at -O2 misreads
  // vector::insert's reallocation as an out-of-bounds copy (-Warray-bounds).
  std::vector<uint8_t> bytes(sizeof(hello_frame) + sizeof(challenge_frame));
  std::memcpy(bytes.data(), hello_frame, sizeof(hello_frame));
  std::memcpy(bytes.data() + sizeof(hello_frame), challenge_frame,
              sizeof(challenge_frame));
  return bytes;
}

std::vector<uint8_t> Garbage() {
  const std::string text =
      "GET /metrics HTTP/1.1\r\nHost: starling\r\n\r\n"
      "\x01\x02\x03 not a frame, not a frame, not a frame";
  return std::vector<uint8_t>(text.begin(), text.end());
}

bool WaitForServing(NodeCluster& cluster, absl::Duration bound) {
  const absl::Time deadline = absl::Now() + bound;
  for (int d = 0; d < kFormationDaemons; ++d) {
    while (true) {
      proto::NodeStatusReply status;
      std::string error;
      if (cluster.NodeStatus(d, &status, &error)) break;
      if (absl::Now() > deadline || !cluster.Alive(cluster.daemon_pid(d))) {
        return false;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return true;
}

bool WaitForJoined(NodeCluster& cluster, int nodes) {
  proto::JobStatus status;
  return cluster.WaitForJob(
      absl::Seconds(10),
      [nodes](const proto::JobStatus& s) { return s.nodes_size() == nodes; },
      &status);
}

void ExpectHealthyGroup(NodeCluster& cluster) {
  proto::JobStatus status;
  std::string error;
  ASSERT_TRUE(cluster.JobStatus(&status, &error)) << error;
  EXPECT_TRUE(status.formed());
  EXPECT_EQ(status.healthy_nodes(), kFormationDaemons) << status.DebugString();
  EXPECT_FALSE(status.degraded());
  ASSERT_EQ(status.nodes_size(), kFormationDaemons);
  for (int r = 0; r < kFormationDaemons; ++r) {
    const proto::PeerInfo& peer = status.nodes(r).peer();
    EXPECT_EQ(peer.rank(), r);
    EXPECT_EQ(peer.hostname(), absl::StrCat("node", r));
    EXPECT_EQ(peer.data_address(),
              absl::StrCat("127.0.0.1:", cluster.data_port(r)));
    EXPECT_EQ(peer.health(), proto::NODE_HEALTH_HEALTHY) << "rank " << r;
    EXPECT_TRUE(cluster.Alive(cluster.daemon_pid(r))) << "rank " << r;
  }
  proto::NodeStatusReply node2;
  ASSERT_TRUE(cluster.NodeStatus(2, &node2, &error)) << error;
  EXPECT_EQ(node2.rank(), 2);
}

ClusterOptions FormationOptions() {
  ClusterOptions options;
  options.daemons = kFormationDaemons;
  options.local_workers = 1;
  options.parameter_count = 90;
  options.heartbeat_timeout = absl::Seconds(2);
  return options;
}

}  // namespace testing_node
}  // namespace starling
