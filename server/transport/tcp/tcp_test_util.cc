#include "server/transport/tcp/tcp_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {
namespace tcp {

PortReservation::PortReservation(int n) {
  for (int i = 0; i < n; ++i) {
    ScopedFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    STARLING_CHECK(fd.valid());
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in address;
    std::memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    STARLING_CHECK(bind(fd.get(), reinterpret_cast<sockaddr*>(&address),
                        sizeof(address)) == 0);
    socklen_t length = sizeof(address);
    STARLING_CHECK(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address),
                               &length) == 0);
    peers_.push_back(PeerAddress{"127.0.0.1", ntohs(address.sin_port)});
    fds_.push_back(std::move(fd));
  }
}

TcpOptions TestOptions(const std::vector<PeerAddress>& peers, int rank) {
  TcpOptions options;
  options.rank = rank;
  options.peers = peers;
  options.connect_timeout = absl::Seconds(20);
  options.shutdown_timeout = absl::Seconds(2);
  return options;
}

absl::StatusOr<std::vector<std::unique_ptr<TcpTransport>>> CreateGroup(
    int n, const std::function<void(TcpOptions&)>& tweak) {
  PortReservation ports(n);
  return CreateGroupOn(ports.peers(), tweak);
}

std::vector<absl::StatusOr<std::unique_ptr<TcpTransport>>> CreateEachOn(
    const std::vector<PeerAddress>& peers,
    const std::function<void(TcpOptions&)>& tweak) {
  const int n = peers.size();
  std::vector<absl::StatusOr<std::unique_ptr<TcpTransport>>> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TcpOptions options = TestOptions(peers, r);
      if (tweak) tweak(options);
      results[r] = TcpTransport::Create(options);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

absl::StatusOr<std::vector<std::unique_ptr<TcpTransport>>> CreateGroupOn(
    const std::vector<PeerAddress>& peers,
    const std::function<void(TcpOptions&)>& tweak) {
  const int n = peers.size();
  std::vector<absl::StatusOr<std::unique_ptr<TcpTransport>>> results =
      CreateEachOn(peers, tweak);
  std::vector<std::unique_ptr<TcpTransport>> group;
  for (int r = 0; r < n; ++r) {
    if (!results[r].ok()) return results[r].status();
    group.push_back(std::move(*results[r]));
  }
  return group;
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
