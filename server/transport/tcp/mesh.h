// Forms the all-to-all mesh of TCP connections for a group: every rank
// connects to each lower rank (sockets_per_peer times) and accepts from each
// higher rank, and each connection starts with the authenticated handshake
// (handshaker.h, frame_format.md). Deterministic, so two ranks never race to
// connect to each other. Accepting runs concurrently with connecting, and
// every accepted connection handshakes on its own (acceptor.h), so no
// connection, however slow, idle or forged, holds up another.
// Thread-compatible; blocks until the mesh forms or the connect window ends.
#ifndef STARLING_SERVER_TRANSPORT_TCP_MESH_H_
#define STARLING_SERVER_TRANSPORT_TCP_MESH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/transport/handshake.h"
#include "server/transport/tcp/handshaker.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_options.h"

namespace starling {
namespace transport {
namespace tcp {

// Returns connections[peer][socket_index] (empty for the own rank), each
// connected and handshaken (blocking or not: the caller sets the mode).
// Errors: FailedPrecondition for a handshake mismatch reported by either side
// (naming both ranks and what differs), Unauthenticated for a failed
// cluster-secret proof or a peer the secret policy refuses (naming how to
// fix it), DeadlineExceeded naming the ranks that did not connect within
// options.connect_timeout (with the last refusal, if any), Unavailable for
// network failures.
absl::StatusOr<std::vector<std::vector<ScopedFd>>> FormMesh(
    const TcpOptions& options, int listen_fd, const RankNamer& name);

// Connects to `peer` (a lower rank) as connection `socket_index` and runs
// the connecting side of the handshake, retrying while the peer cannot be
// reached or drops the connection without a word, until `deadline`. Returns
// the connection (blocking) once the peer said WELCOME; errors as FormMesh().
absl::StatusOr<ScopedFd> DialPeer(const TcpOptions& options, int peer,
                                  int socket_index, absl::Time deadline,
                                  const RankNamer& name);

// The handshake settings `options` imply for `role`: our HELLO (socket index
// and receiver left 0 for the caller), the secret and the insecure flag.
HandshakeConfig HandshakeConfigFor(const TcpOptions& options,
                                   HandshakeConfig::Role role,
                                   const RankNamer& name);

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_MESH_H_
