// A whole group over TCP with the fabric path under it, in one process (one
// thread per rank), on 127.0.0.1 with libfabric's tcp provider. Testonly.
#ifndef STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_TEST_UTIL_H_
#define STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/transport/fabric/fabric_connect.h"
#include "server/transport/tcp/tcp_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace fabric {

// 4 slots of 64 KiB on 127.0.0.1.
FabricOptions TestFabricOptions();

struct FabricGroup {
  std::vector<std::unique_ptr<tcp::TcpTransport>> transports;
  std::vector<FabricRoutes> routes;  // by rank
  std::vector<Transport*> Raw() const;
};

// Test-sized slots (so that writes of a few hundred KiB already wait for
// credits) unless `options` says otherwise; `uses[r]` is rank r's choice
// (empty: every rank kRequired). Returns the first rank's error.
absl::StatusOr<FabricGroup> CreateFabricGroup(
    int n, bool verbs_style, std::vector<FabricUse> uses = {},
    FabricOptions options = TestFabricOptions());

// The paths a test can put under a group on this machine: the fabric over
// libfabric's tcp provider as it reports its rules, the same following
// verbs' rules, and shared memory (every rank on one host, 64 KiB rings),
// with large writes read from the writer's memory (single copy) or every
// byte through the rings.
enum class PathKind { kAsReported, kVerbsStyle, kShm, kShmRingsOnly };
std::string PathKindName(PathKind kind);
absl::StatusOr<FabricGroup> CreatePathGroup(int n, PathKind kind);

}  // namespace fabric
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FABRIC_FABRIC_TEST_UTIL_H_
