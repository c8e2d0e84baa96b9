// The daemon's choice of data-plane transport per peer (--transport,
// --fabric_provider): the flag's checks, the providers tried, the start-up
// probe of a forced fabric, and the one-line summary status shows.
#ifndef STARLING_SERVER_NODE_TRANSPORT_CHOICE_H_
#define STARLING_SERVER_NODE_TRANSPORT_CHOICE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/node/node_options.h"
#include "server/transport/fabric/fabric_connect.h"

namespace starling {
namespace node {

// InvalidArgument naming the flag unless --transport is auto, tcp, fabric
// or shm.
absl::Status CheckTransportOptions(const NodeOptions& options);

// The libfabric providers to try, in order: --fabric_provider's, else the
// fabrics that beat TCP (verbs, then efa).
std::vector<std::string> FabricProviders(const NodeOptions& options);

// With --transport=fabric, opens the fabric once at start-up and closes it, so
// that a machine without it fails before joining: Unavailable naming what is
// missing ("no fabric: fi_getinfo(verbs) found none for 10.0.0.1 ... ; ulimit
// -l is 64 KiB"). Ok otherwise, without opening anything.
absl::Status ProbeForcedFabric(const NodeOptions& options);

// What ConnectFabric() is told, from --transport: auto: shared memory with
// every peer daemon of this host, the fabric (verbs, efa) with every other
// peer where both ends have it; tcp: neither; fabric: the fabric with every
// peer, even on this host; shm: shared memory with every peer (all on this
// host).
transport::fabric::ConnectOptions ConnectOptionsFor(const NodeOptions& options);

// "fabric (verbs;ofi_rxm) to 3 peers, tcp to 1" from each peer's transport
// name ("" for this rank); "none" with no peer.
std::string TransportSummary(const std::vector<std::string>& peer_transports);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_TRANSPORT_CHOICE_H_
