// Forms the all-to-all mesh of TCP connections for a group: every rank
// connects to each lower rank (sockets_per_peer times) and accepts from each
// higher rank, and each connection starts with the HELLO handshake
// (frame_format.md). Deterministic, so two ranks never race to connect to
// each other. Thread-compatible; blocks until the mesh forms or the
// connect window ends.
#ifndef STARLING_SERVER_TRANSPORT_TCP_MESH_H_
#define STARLING_SERVER_TRANSPORT_TCP_MESH_H_

#include <vector>

#include "absl/status/statusor.h"
#include "server/transport/handshake.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_options.h"

namespace starling {
namespace transport {
namespace tcp {

// Returns connections[peer][socket_index] (empty for the own rank), each
// connected, handshaken and still blocking. Errors: FailedPrecondition for a
// handshake mismatch reported by either side (naming both ranks and what
// differs), DeadlineExceeded naming the ranks that did not connect within
// options.connect_timeout (with the last refusal, if any), Unavailable for
// network failures.
absl::StatusOr<std::vector<std::vector<ScopedFd>>> FormMesh(
    const TcpOptions& options, int listen_fd, const RankNamer& name);

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_MESH_H_
