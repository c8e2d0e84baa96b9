// Helpers for the formation suites (formation_stranger_test.cc,
// forged_hello_without_secret_test.cc): three starling-node daemons form a
// group while connections of the test's own (strangers) sit at their data
// ports; what a stranger sends (server/transport/frame_format.md,
// "Handshake"); and the checks that the group formed as it should.
// Testonly; thread-compatible.
#ifndef STARLING_TESTS_NODE_FORMATION_STRANGERS_H_
#define STARLING_TESTS_NODE_FORMATION_STRANGERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/transport/auth.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {

inline constexpr int kFormationDaemons = 3;
// Formation must take well under this; a stranger holding up a daemon for
// its handshake deadline (5 s) would exceed it.
inline constexpr absl::Duration kFormationBound = absl::Seconds(4);

// kFormationDaemons daemons, one worker each, heartbeats every 400 ms.
ClusterOptions FormationOptions();

// A connection of the test's own to 127.0.0.1:`port`; closes on
// destruction. Reads wait at most 10 s.
class Stranger {
 public:
  explicit Stranger(int port);
  ~Stranger();
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;

  bool connected() const { return connected_; }
  // Sends all of `bytes`; false on error.
  bool Send(const std::vector<uint8_t>& bytes);
  // Reads exactly `n` bytes; false on close, error or the 10 s bound.
  bool Receive(size_t n, std::vector<uint8_t>* bytes);

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// HELLO (claiming rank `rank` of `group_size`, to `receiver`, socket 0 of
// 1) and CHALLENGE in `mode` with a fixed nonce, as a real rank opens a
// connection. Fills `transcript`'s connecting half unless null.
std::vector<uint8_t> ForgedOpening(int rank, int receiver, int group_size,
                                   transport::AuthMode mode,
                                   transport::Transcript* transcript);

// Garbage: an HTTP request where a frame header belongs.
std::vector<uint8_t> Garbage();

// Polls (bounded) until every daemon's admin service answers, i.e. every
// daemon formed its data plane and serves; false past `bound` or once a
// daemon exited.
bool WaitForServing(NodeCluster& cluster, absl::Duration bound);

// Polls (bounded, 10 s) until the coordinator lists `nodes` nodes.
bool WaitForJoined(NodeCluster& cluster, int nodes);

// The group as it should be (gtest expectations): formed, all healthy,
// rank r is node<r> at its own data port and its daemon runs.
void ExpectHealthyGroup(NodeCluster& cluster);

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_FORMATION_STRANGERS_H_
