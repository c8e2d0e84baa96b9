// Probes for RDMA verbs devices (libibverbs) and picks the data-plane
// transport kind. Starling has no RDMA transport yet: where a device exists
// the daemon is told so, and TCP is used either way. Thread-safe.
#ifndef STARLING_SERVER_TRANSPORT_RDMA_RDMA_PROBE_H_
#define STARLING_SERVER_TRANSPORT_RDMA_RDMA_PROBE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace starling {
namespace transport {
namespace rdma {

struct RdmaDevice {
  std::string name;  // "mlx5_0"
  std::string guid;  // node GUID, hex
};

// Lists RDMA devices through ibv_get_device_list(). Unavailable "no RDMA
// device found; using TCP" when there is none (or the verbs library cannot
// list devices, with its reason).
absl::StatusOr<std::vector<RdmaDevice>> ProbeRdmaDevices();

enum class TransportKind { kTcp, kRdma };

struct TransportChoice {
  TransportKind kind = TransportKind::kTcp;
  std::string reason;  // one line for the daemon's log
};

// The transport the daemon should use between hosts, from the probe's
// answer: TCP while there is no RDMA transport, with a reason saying why
// ("no RDMA device found; using TCP", or that devices exist but the RDMA
// transport is not built).
TransportChoice SelectTransportKind(
    const absl::StatusOr<std::vector<RdmaDevice>>& probe);

}  // namespace rdma
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_RDMA_RDMA_PROBE_H_
