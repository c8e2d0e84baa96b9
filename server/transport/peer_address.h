// PeerAddress and the parser for a group's peer list
// ("host[:port],host[:port],..."), indexed by rank.
#ifndef STARLING_SERVER_TRANSPORT_PEER_ADDRESS_H_
#define STARLING_SERVER_TRANSPORT_PEER_ADDRESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace transport {

// Where a rank listens. Value type; thread-compatible.
struct PeerAddress {
  std::string host;
  uint16_t port = 0;

  // "10.77.0.4:29503".
  std::string ToString() const;

  friend bool operator==(const PeerAddress& a, const PeerAddress& b) {
    return a.host == b.host && a.port == b.port;
  }
  friend bool operator!=(const PeerAddress& a, const PeerAddress& b) {
    return !(a == b);
  }
};

// Parses "host[:port],host[:port],...": entry i is rank i. A bare host listens
// on `base_port + i`. Whitespace around entries is ignored. Returns
// InvalidArgument, naming the entry and its position, for an empty list or
// entry, a missing host, a port that is not a number in 1..65535 (including
// base_port + i out of range), or an address listed twice.
absl::StatusOr<std::vector<PeerAddress>> ParsePeerList(absl::string_view list,
                                                       int base_port);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_PEER_ADDRESS_H_
