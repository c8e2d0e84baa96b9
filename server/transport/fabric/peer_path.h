// PeerPath: a WritePath (write_path.h) that ConnectFabric() (fabric_connect.h)
// can offer peers and connect through the HELLO exchange: the fabric's
// one-sided writes (fabric_path.h) between hosts, shared-memory rings
// (shm/shm_path.h) between daemons of one host.
//
// Thread-safe.
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_PEER_PATH_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_PEER_PATH_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/transport/fabric/fabric_wire.h"
#include "server/transport/write_path.h"

namespace starling {
namespace transport {
namespace fabric {

class PeerPath : public WritePath {
 public:
  // The HELLO to send `peer`: where and how it may write to this rank.
  virtual FabricHello HelloFor(int peer) const = 0;

  // Takes `peer`'s HELLO, before Attach(); an error (naming what differs or
  // failed) leaves the peer to another path.
  virtual absl::Status Connect(int peer, const FabricHello& hello) = 0;

  // After every Connect() and before Attach(): sets up what the connected
  // peers need (a path whose HELLO already carried everything does
  // nothing). Every wait ends by `deadline`, naming the peer.
  virtual absl::Status Establish(absl::Time deadline) {
    (void)deadline;
    return absl::OkStatus();
  }

  // Memory registrations since the path opened (constant once open: none
  // per op); 0 for a path that registers nothing.
  virtual uint64_t registrations() const = 0;
};

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_PEER_PATH_H_
