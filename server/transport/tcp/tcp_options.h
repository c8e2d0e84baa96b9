// Options of the TCP transport. Value type; thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_TCP_TCP_OPTIONS_H_
#define STARLING_SERVER_TRANSPORT_TCP_TCP_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/transport/frame.h"
#include "server/transport/peer_address.h"

namespace starling {
namespace transport {
namespace tcp {

struct TcpOptions {
  // This process's rank: an index into `peers`.
  int rank = -1;

  // Every rank's listening address, indexed by rank (ParsePeerList()).
  std::vector<PeerAddress> peers;

  // Host to bind the listening socket to; empty: peers[rank].host. Its port
  // is always peers[rank].port.
  std::string listen_host;

  // An already bound and listening socket to use instead of binding one
  // (listen_host is then ignored), so that a daemon can take its data port
  // before it joins the group (Listen() in socket_util.h binds one). -1:
  // Create() binds. Create() owns it from the call on, whatever it returns,
  // and closes it once the mesh has formed or failed.
  int listen_fd = -1;

  // The cluster secret (raw bytes, e.g. from ReadClusterSecret() in
  // auth.h). Set: every connection proves both ways that it knows it
  // (HMAC-SHA256 over both sides' nonces, frame_format.md) before any data
  // moves, and every rank must have the same one. Empty: peers are accepted
  // only from loopback addresses, unless `insecure`.
  std::string cluster_secret;

  // The group's key, handed to its members by the coordinator when the
  // group formed (JoinResponse.group_key). Set: every connection proves
  // both ways that it knows it (with cluster_secret, if set), so a process
  // that is not a member is refused even on loopback. It travels over the
  // control plane, so without a cluster_secret peers are still accepted
  // only from loopback addresses, unless `insecure`.
  std::string group_key;
  // The coordinator's group epoch of this group (JoinResponse.group_epoch):
  // every connection's HELLO carries it, and a peer of another epoch (a
  // daemon of a group re-formed since) is refused, naming both epochs.
  uint64_t group_epoch = 0;

  // With no cluster_secret: accept peers from any address, unauthenticated
  // (a trusted network only; the caller should log a warning). Ignored when
  // cluster_secret is set.
  bool insecure = false;

  // Each accepted connection must finish its handshake within this of being
  // accepted, or it is dropped. Handshakes run concurrently, so a stray,
  // idle or forged connection delays no one; this only bounds how long one
  // holds its few bytes of state.
  absl::Duration handshake_timeout = absl::Seconds(5);

  // Connections per pair of ranks. Writes of at least stripe_min_bytes are
  // split into one part per connection, so that several streams (and the
  // peer's receive path) share the load where one cannot fill the link.
  int sockets_per_peer = 1;
  size_t stripe_min_bytes = size_t{1} << 20;

  // Peers start at different times: connecting retries with exponential
  // backoff (initial_backoff doubling up to max_backoff) until this window
  // has passed, and Create() fails if the group has not formed by then.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Polled while the group forms (between connection attempts, and every
  // kGiveUpPoll while waiting to be connected to): once it returns a
  // reason, forming stops with Cancelled naming it (a later group
  // replaced this one; a member died while it formed). Unset: never.
  std::function<std::optional<std::string>()> give_up;
  absl::Duration initial_backoff = absl::Milliseconds(10);
  absl::Duration max_backoff = absl::Milliseconds(500);

  // Bytes of writes held for regions not registered yet; beyond it the
  // transport stops reading the sending connection until a registration.
  size_t max_early_bytes = size_t{64} << 20;

  // SO_SNDBUF / SO_RCVBUF; 0 leaves the kernel's autotuning in charge.
  // The send buffer is capped by default: what a socket holds queues in
  // front of the next step's data on the same port (a shared FIFO in
  // switches and in the simulated cluster), so a butterfly whose
  // partners' streams overlap at step boundaries waited behind up to
  // megabytes of the previous step's. With 256 KiB (the kernel allows
  // twice that), 8 hosts at 1 Gbit/s: butterfly 74.5 -> 63.1 ms at 1e6
  // floats and 673 -> 629 ms at 1e7, the ring unchanged (59.2 and 593 ms);
  // on loopback 5.3 -> 7.1 GiB/s (tests/bench/RESULTS.md run 10). A
  // connection moves at most about twice this per round trip: raise it
  // where the bandwidth-delay product is larger (long, fast links). The
  // receive buffer stays autotuned (capping it measured slower).
  int socket_send_buffer_bytes = 256 * 1024;
  int socket_recv_buffer_bytes = 0;

  // WaitForWrite() polls this long (bounded, no lock held, yielding the core
  // between polls) before sleeping, so that a write landing within it skips
  // a thread wake-up: on 127.0.0.1 it cut the median 8-byte round trip from
  // 59 to 24 us. 0: never spin.
  absl::Duration wait_spin = absl::Microseconds(50);

  // After handling socket events, the I/O thread polls its sockets this
  // long (epoll without sleeping, yielding the core between polls) before it
  // sleeps, so that the next frame of a running op is read without a thread
  // wake-up; with wait_spin, a small all-reduce then wakes no thread at all
  // (4 hosts, 4 KB: 224-277 -> 97-102 us median, tests/bench/RESULTS.md
  // run 10). Not after bulk traffic (a flush of a full socket, a frame with
  // more than 64 KiB still to come), whose wake-ups are few per byte: there
  // the loop sleeps at once. 0: sleep at once always.
  absl::Duration loop_spin = absl::Microseconds(200);

  // Largest control message accepted (sent or received).
  size_t max_control_bytes = size_t{1} << 20;

  // How long the destructor waits for peers to acknowledge GOODBYE.
  absl::Duration shutdown_timeout = absl::Seconds(2);

  // Called once per peer whose connection ended under this transport as
  // its first failure (closed or reset without GOODBYE or ERROR: the peer
  // process may be gone), from the transport's event loop; must not block.
  // May be empty.
  std::function<void(int peer, const absl::Status& why)> on_peer_vanished;

  // Protocol version announced in HELLO; tests set another to check the
  // mismatch error.
  uint8_t protocol_version_for_testing = kProtocolVersion;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_TCP_OPTIONS_H_
