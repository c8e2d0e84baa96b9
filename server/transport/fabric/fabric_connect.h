// Puts write paths under a formed stream transport, per peer: shared memory
// (shm/shm_path.h) with a peer daemon on the same host, the fabric (verbs,
// efa, ...; fabric_path.h) with the others where both ends have it, the
// stream (TCP) otherwise. Every rank opens the paths it may use, the ranks
// trade HELLOs (fabric_wire.h) over the transport's authenticated
// connections, and both ends of a pair decide alike from the same HELLOs.
//
// Every rank of the group must call ConnectFabric() (each with its own
// choice: a rank that uses neither path still answers, as unusable), before
// any write.
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/transport/fabric/fabric_path.h"
#include "server/transport/inbox_transport.h"
#include "server/transport/shm/shm_path.h"

namespace starling {
namespace transport {
namespace fabric {

enum class FabricUse {
  kOff,       // answer every peer "not used here"
  kAuto,      // use it with every peer it can serve, TCP with the rest
  kRequired,  // every peer over it, or an error naming what is missing
};

struct ConnectOptions {
  // The fabric between hosts: `providers` tried in order, the first that
  // opens is used (fabric.provider is ignored).
  FabricUse fabric = FabricUse::kAuto;
  std::vector<std::string> providers;
  FabricOptions fabric_options;
  // Shared memory with the peers whose host_id equals this rank's; it goes
  // before the fabric for them.
  FabricUse shm = FabricUse::kOff;
  shm::ShmPathOptions shm_options;
  // Names this machine (LocalHostId()); empty: no peer shares it.
  std::string host_id;
};

struct FabricRoute {
  int peer = -1;
  // "tcp", or the path's name: "fabric (verbs;ofi_rxm)", "shm".
  std::string transport = "tcp";
  // One line for the log: the transport, or "tcp: rank 2 (10.0.0.3:29500)
  // has no fabric: fi_getinfo(verbs) found none".
  std::string why;
};

struct FabricRoutes {
  std::vector<FabricRoute> peers;  // every other rank, in rank order
  // The paths' counters where one was adopted (null otherwise); owned by
  // the transport.
  const FabricPath* path = nullptr;
  const shm::ShmPath* shm_path = nullptr;
};

// "<hostname>/<kernel boot id>/<network namespace>" of this machine (the
// kernel's host name, not a daemon's --hostname label): daemons with the
// same one run on one kernel, in one network namespace, and can share
// memory.
std::string LocalHostId();

// Runs the exchange over `transport` and adopts the paths for their peers.
// kRequired: the path's own error if it cannot open, or FailedPrecondition
// naming each peer without it and why. Every wait ends by `deadline`,
// naming the peer that did not answer.
absl::StatusOr<FabricRoutes> ConnectFabric(InboxTransport* transport,
                                           const ConnectOptions& options,
                                           absl::Time deadline);

// The fabric alone (no shared memory), as before.
absl::StatusOr<FabricRoutes> ConnectFabric(
    InboxTransport* transport, FabricUse use,
    const std::vector<std::string>& providers, FabricOptions options,
    absl::Time deadline);

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_CONNECT_H_
