#include "server/transport/fabric/fabric_connect.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace fabric {

absl::StatusOr<FabricRoutes> ConnectFabric(
    InboxTransport* transport, FabricUse use,
    const std::vector<std::string>& providers, FabricOptions options,
    absl::Time deadline) {
  const int rank = transport->rank();
  const int size = transport->size();
  auto name = [transport](int r) { return transport->PeerName(r); };
  std::unique_ptr<FabricPath> path;
  std::string unusable = "the fabric is off here (--transport)";
  if (use != FabricUse::kOff) {
    std::vector<std::string> errors;
    for (const std::string& provider : providers) {
      options.provider = provider;
      absl::StatusOr<std::unique_ptr<FabricPath>> opened =
          FabricPath::Open(options, rank, size, name);
      if (opened.ok()) {
        path = *std::move(opened);
        break;
      }
      errors.push_back(std::string(opened.status().message()));
    }
    if (path == nullptr) {
      unusable = providers.empty() ? "no fabric provider named"
                                   : absl::StrJoin(errors, "; ");
      if (use == FabricUse::kRequired) {
        return absl::UnavailableError(
            absl::StrCat(name(rank), " cannot use the fabric: ", unusable));
      }
    }
  }

  // Every peer gets a HELLO, usable or not, so that no one waits.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    FabricHello hello;
    if (path != nullptr) {
      hello = path->HelloFor(peer);
    } else {
      hello.rank = static_cast<uint32_t>(rank);
      hello.size = static_cast<uint32_t>(size);
      hello.text = unusable;
    }
    STARLING_RETURN_IF_ERROR(transport->SendControl(peer, kFabricHelloTag,
                                                    EncodeFabricHello(hello)));
  }

  FabricRoutes routes;
  std::vector<int> fabric_peers;
  std::vector<std::string> missing;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    absl::StatusOr<std::vector<std::byte>> message =
        transport->RecvControl(peer, kFabricHelloTag, deadline);
    if (!message.ok()) {
      return absl::Status(
          message.status().code(),
          absl::StrCat("waiting for ", name(peer),
                       "'s fabric HELLO: ", message.status().message()));
    }
    absl::StatusOr<FabricHello> hello = DecodeFabricHello(*message);
    if (!hello.ok()) {
      return absl::Status(
          hello.status().code(),
          absl::StrCat(name(peer), " sent a ", hello.status().message()));
    }
    FabricRoute route;
    route.peer = peer;
    if (path == nullptr) {
      route.why = absl::StrCat("tcp: ", unusable);
    } else if (!hello->usable) {
      route.why =
          absl::StrCat("tcp: ", name(peer), " has no fabric: ", hello->text);
    } else {
      absl::Status connected = path->Connect(peer, *hello);
      if (connected.ok()) {
        route.fabric = true;
        route.why = path->name();
        fabric_peers.push_back(peer);
      } else {
        route.why = absl::StrCat("tcp: ", connected.message());
      }
    }
    if (!route.fabric) missing.push_back(route.why);
    routes.peers.push_back(std::move(route));
  }
  if (use == FabricUse::kRequired && !missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(rank), " was told to use the fabric with every ",
                     "peer, but: ", absl::StrJoin(missing, "; ")));
  }
  if (path != nullptr && !fabric_peers.empty()) {
    routes.path = path.get();
    STARLING_RETURN_IF_ERROR(
        transport->AdoptWritePath(std::move(path), fabric_peers));
  }
  return routes;
}

}  // namespace fabric
}  // namespace transport
}  // namespace starling
