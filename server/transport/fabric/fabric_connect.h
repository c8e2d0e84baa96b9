// Puts the fabric under a formed stream transport: every rank opens its
// fabric path (fabric_path.h), the ranks trade HELLOs (fabric_wire.h) over
// the transport's authenticated connections, and the writes to each peer
// whose end has a usable fabric too move over it; the rest stay on the
// stream. Both ends of a pair decide alike from the same two HELLOs.
//
// Every rank of the group must call ConnectFabric() (each with its own
// choice: a rank that does not want the fabric still answers, as
// unusable), before any write.
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/transport/fabric/fabric_path.h"
#include "server/transport/inbox_transport.h"

namespace starling {
namespace transport {
namespace fabric {

enum class FabricUse {
  kOff,       // answer every peer "not used here"
  kAuto,      // use it with every peer whose end has it, TCP with the rest
  kRequired,  // every peer over the fabric, or an error naming what is missing
};

struct FabricRoute {
  int peer = -1;
  bool fabric = false;
  // One line for the log: "fabric (verbs;ofi_rxm)", or "tcp: rank 2
  // (10.0.0.3:29500) has no fabric: fi_getinfo(verbs) found none".
  std::string why;
};

struct FabricRoutes {
  std::vector<FabricRoute> peers;  // every other rank, in rank order
  // The path's counters where one was opened (null otherwise); owned by
  // the transport.
  const FabricPath* path = nullptr;
};

// Runs the exchange over `transport` and adopts the path for the fabric
// peers. `providers` are tried in order, the first that opens is used
// (options.provider is ignored). kRequired: the path's own error if it cannot
// open, or FailedPrecondition naming each peer without it and why. Every
// wait ends by `deadline`, naming the peers that did not answer.
absl::StatusOr<FabricRoutes> ConnectFabric(
    InboxTransport* transport, FabricUse use,
    const std::vector<std::string>& providers, FabricOptions options,
    absl::Time deadline);

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_
