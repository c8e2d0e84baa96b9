// Thin, Status-returning wrappers over the BSD socket calls the TCP transport
// needs during setup: resolve, listen, connect with retry, and blocking
// send/receive with a deadline (for the handshake). Thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_TCP_SOCKET_UTIL_H_
#define STARLING_SERVER_TRANSPORT_TCP_SOCKET_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/base/scoped_fd.h"
#include "server/transport/peer_address.h"

namespace starling {
namespace transport {
namespace tcp {

// server/base/scoped_fd.h, as the socket calls below return it.
using ::starling::ScopedFd;

// "<what>: <strerror(err)>" with the code errno suggests.
absl::Status ErrnoStatus(int err, absl::string_view what);

// Binds and listens on `address` (SO_REUSEADDR so a restarted daemon can
// reuse a port in TIME_WAIT). Unavailable "address 127.0.0.1:7001 already in
// use (rank 1)" if another socket listens there; with a negative `rank` (a
// daemon binding its data port before it knows its rank) the message has no
// "(rank R)".
absl::StatusOr<ScopedFd> Listen(const PeerAddress& address, int rank);

// InvalidArgument unless `fd` is a listening socket.
absl::Status CheckListening(int fd);

// The port a bound socket has (for one bound to port 0).
absl::StatusOr<int> LocalPort(int fd);

// The other end of a connected socket: its address ("10.0.0.9:51234",
// "[::1]:7000") and whether that is a loopback address (127.0.0.0/8, ::1,
// or IPv4-mapped 127.0.0.0/8). Unavailable if the socket is not connected.
struct RemoteEndpoint {
  std::string address;
  bool loopback = false;
};
absl::StatusOr<RemoteEndpoint> GetRemoteEndpoint(int fd);

// Connects to `address`, retrying refused or unreachable attempts with
// exponential backoff (from `initial_backoff`, doubling up to `max_backoff`)
// until `deadline`; DeadlineExceeded naming `who` and the last error then.
absl::StatusOr<ScopedFd> ConnectWithRetry(const PeerAddress& address,
                                          absl::string_view who,
                                          absl::Time deadline,
                                          absl::Duration initial_backoff,
                                          absl::Duration max_backoff);

// Accepts one connection, waiting until `deadline` (DeadlineExceeded).
absl::StatusOr<ScopedFd> AcceptUntil(int listen_fd, absl::Time deadline);

// Sends or receives exactly `n` bytes on a socket, waiting until `deadline`.
// Unavailable on end of stream or error, DeadlineExceeded on time out; `who`
// names the peer in messages.
absl::Status SendAllUntil(int fd, const void* data, size_t n,
                          absl::Time deadline, absl::string_view who);
absl::Status RecvAllUntil(int fd, void* data, size_t n, absl::Time deadline,
                          absl::string_view who);

// Makes `fd` non-blocking and sets TCP_NODELAY, plus SO_SNDBUF / SO_RCVBUF
// when the sizes are positive.
absl::Status ConfigureDataSocket(int fd, int send_buffer_bytes,
                                 int recv_buffer_bytes);

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_SOCKET_UTIL_H_
