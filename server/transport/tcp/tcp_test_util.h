// Test helpers for the TCP transport: free loopback ports for a group, and
// a whole group created in one process (one thread per rank). Testonly.
#ifndef STARLING_SERVER_TRANSPORT_TCP_TCP_TEST_UTIL_H_
#define STARLING_SERVER_TRANSPORT_TCP_TCP_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_options.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace transport {
namespace tcp {

// Holds `n` distinct 127.0.0.1 ports: each is bound (SO_REUSEADDR, not
// listening), so the kernel hands it to no other socket, yet a transport
// may still bind and listen on it. Keep it alive until the group exists.
class PortReservation {
 public:
  explicit PortReservation(int n);
  const std::vector<PeerAddress>& peers() const { return peers_; }

 private:
  std::vector<ScopedFd> fds_;
  std::vector<PeerAddress> peers_;
};

// Options for rank `rank` of a group on `peers`, with test-sized timeouts.
TcpOptions TestOptions(const std::vector<PeerAddress>& peers, int rank);

// Creates every rank of a group concurrently (each Create() on its own
// thread). `tweak` may adjust each rank's options. Returns the first error.
absl::StatusOr<std::vector<std::unique_ptr<TcpTransport>>> CreateGroup(
    int n, const std::function<void(TcpOptions&)>& tweak = nullptr);

// The same on given addresses (e.g. ports the test already listens on).
absl::StatusOr<std::vector<std::unique_ptr<TcpTransport>>> CreateGroupOn(
    const std::vector<PeerAddress>& peers,
    const std::function<void(TcpOptions&)>& tweak = nullptr);

// Every rank's own result, by rank, for tests of formations that fail
// (each rank's error names what it saw).
std::vector<absl::StatusOr<std::unique_ptr<TcpTransport>>> CreateEachOn(
    const std::vector<PeerAddress>& peers,
    const std::function<void(TcpOptions&)>& tweak = nullptr);

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_TCP_TEST_UTIL_H_
