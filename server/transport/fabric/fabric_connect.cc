#include "server/transport/fabric/fabric_connect.h"

#include <unistd.h>

#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace fabric {
namespace {

// One kind of path (the fabric, or shared memory) on this rank.
struct Side {
  const char* what = "";  // "fabric", "shared memory"
  uint32_t tag = 0;
  FabricUse use = FabricUse::kOff;
  std::unique_ptr<PeerPath> path;
  std::string unusable;    // why there is no path here
  std::vector<int> peers;  // peers it will carry
};

// `side`'s use was `why` it has no path here: an error if it was required.
absl::Status Unusable(Side* side, std::string why, int rank,
                      const RankNamer& name) {
  side->unusable = std::move(why);
  if (side->use == FabricUse::kRequired) {
    return absl::UnavailableError(absl::StrCat(
        name(rank), " cannot use the ", side->what, ": ", side->unusable));
  }
  return absl::OkStatus();
}

// Opens the fabric's path with the first of `providers` that opens.
absl::Status OpenFabric(Side* side, const std::vector<std::string>& providers,
                        FabricOptions options, int rank, int size,
                        const RankNamer& name) {
  if (side->use == FabricUse::kOff) {
    side->unusable = absl::StrCat("the ", side->what, " is off here");
    return absl::OkStatus();
  }
  std::vector<std::string> errors;
  for (const std::string& provider : providers) {
    options.provider = provider;
    absl::StatusOr<std::unique_ptr<FabricPath>> opened =
        FabricPath::Open(options, rank, size, name);
    if (opened.ok()) {
      side->path = *std::move(opened);
      return absl::OkStatus();
    }
    errors.push_back(std::string(opened.status().message()));
  }
  return Unusable(side,
                  providers.empty() ? "no fabric provider named"
                                    : absl::StrJoin(errors, "; "),
                  rank, name);
}

absl::Status OpenShm(Side* side, const shm::ShmPathOptions& options, int rank,
                     int size, const RankNamer& name) {
  if (side->use == FabricUse::kOff) {
    side->unusable = absl::StrCat(side->what, " is off here");
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<shm::ShmPath>> opened =
      shm::ShmPath::Open(options, rank, size, name);
  if (!opened.ok()) {
    return Unusable(side, std::string(opened.status().message()), rank, name);
  }
  side->path = *std::move(opened);
  return absl::OkStatus();
}

FabricHello HelloOf(const Side& side, int peer, int rank, int size,
                    const std::string& host_id) {
  FabricHello hello;
  if (side.path != nullptr) {
    hello = side.path->HelloFor(peer);
  } else {
    hello.rank = static_cast<uint32_t>(rank);
    hello.size = static_cast<uint32_t>(size);
    hello.text = side.unusable;
  }
  hello.host = host_id;
  return hello;
}

absl::StatusOr<FabricHello> ReceiveHello(InboxTransport* transport, int peer,
                                         uint32_t tag, absl::Time deadline) {
  absl::StatusOr<std::vector<std::byte>> message =
      transport->RecvControl(peer, tag, deadline);
  if (!message.ok()) {
    return absl::Status(
        message.status().code(),
        absl::StrCat("waiting for ", transport->PeerName(peer), "'s ",
                     tag == kShmHelloTag ? "shared-memory" : "fabric",
                     " HELLO: ", message.status().message()));
  }
  absl::StatusOr<FabricHello> hello = DecodeFabricHello(*message);
  if (!hello.ok()) {
    return absl::Status(hello.status().code(),
                        absl::StrCat(transport->PeerName(peer), " sent a ",
                                     hello.status().message()));
  }
  return hello;
}

}  // namespace

std::string LocalHostId() {
  char hostname[256] = {};
  ::gethostname(hostname, sizeof(hostname) - 1);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(in, boot_id);
  // Network namespaces of one kernel (a simulated cluster) stay apart.
  char netns[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
  return absl::StrCat(hostname, "/", absl::StripAsciiWhitespace(boot_id), "/",
                      n > 0 ? std::string(netns, n) : std::string());
}

absl::StatusOr<FabricRoutes> ConnectFabric(InboxTransport* transport,
                                           const ConnectOptions& options,
                                           absl::Time deadline) {
  const int rank = transport->rank();
  const int size = transport->size();
  const RankNamer name = [transport](int r) { return transport->PeerName(r); };
  Side fabric;
  fabric.what = "fabric";
  fabric.tag = kFabricHelloTag;
  fabric.use = options.fabric;
  Side shm;
  shm.what = "shared memory";
  shm.tag = kShmHelloTag;
  shm.use = options.shm;
  absl::Status opened = OpenFabric(&fabric, options.providers,
                                   options.fabric_options, rank, size, name);
  opened.Update(OpenShm(&shm, options.shm_options, rank, size, name));

  // Every peer gets both HELLOs, usable or not, so that no one waits: a
  // rank whose required path did not open still tells its peers why, and
  // they fail at once with its reason rather than at the deadline. Its own
  // reason is what it reports, even where a peer that failed the same way
  // has already gone and the HELLO cannot reach it.
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (const Side* side : {&fabric, &shm}) {
      const absl::Status sent = transport->SendControl(
          peer, side->tag,
          EncodeFabricHello(HelloOf(*side, peer, rank, size, options.host_id)));
      if (!sent.ok()) return opened.ok() ? sent : opened;
    }
  }
  STARLING_RETURN_IF_ERROR(opened);

  FabricRoutes routes;
  std::vector<std::string> missing;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    STARLING_ASSIGN_OR_RETURN(
        FabricHello fabric_hello,
        ReceiveHello(transport, peer, kFabricHelloTag, deadline));
    STARLING_ASSIGN_OR_RETURN(
        FabricHello shm_hello,
        ReceiveHello(transport, peer, kShmHelloTag, deadline));
    FabricRoute route;
    route.peer = peer;
    std::vector<std::string> reasons;
    const bool same_host =
        !options.host_id.empty() && shm_hello.host == options.host_id;
    // Shared memory first, for a peer on this host; then the fabric.
    const std::pair<Side*, const FabricHello*> order[] = {
        {&shm, &shm_hello}, {&fabric, &fabric_hello}};
    for (auto [side, hello] : order) {
      if (side->use == FabricUse::kOff) continue;
      if (side == &shm && !same_host) {
        reasons.push_back(absl::StrCat("shared memory: ", name(peer),
                                       " is on another host (", shm_hello.host,
                                       ")"));
        continue;
      }
      if (side->path == nullptr) {
        reasons.push_back(absl::StrCat(side->what, ": ", side->unusable));
        continue;
      }
      if (!hello->usable) {
        reasons.push_back(absl::StrCat(side->what, ": ", name(peer),
                                       " has none: ", hello->text));
        continue;
      }
      absl::Status connected = side->path->Connect(peer, *hello);
      if (!connected.ok()) {
        reasons.push_back(absl::StrCat(side->what, ": ", connected.message()));
        continue;
      }
      route.transport = side->path->name();
      route.why = route.transport;
      side->peers.push_back(peer);
      break;
    }
    if (route.transport == "tcp") {
      route.why = absl::StrCat("tcp: ", absl::StrJoin(reasons, "; "));
      if (reasons.empty()) route.why = "tcp";
    }
    for (const Side* side : {&fabric, &shm}) {
      if (side->use == FabricUse::kRequired &&
          (side->path == nullptr || route.transport != side->path->name())) {
        missing.push_back(absl::StrCat(name(peer), ": ", route.why));
      }
    }
    routes.peers.push_back(std::move(route));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name(rank), " was told to use ",
        options.shm == FabricUse::kRequired ? "shared memory" : "the fabric",
        " with every peer, but ", absl::StrJoin(missing, "; ")));
  }
  for (Side* side : {&fabric, &shm}) {
    if (side->path == nullptr || side->peers.empty()) continue;
    STARLING_RETURN_IF_ERROR(side->path->Establish(deadline));
    if (side == &fabric) {
      routes.path = static_cast<const FabricPath*>(side->path.get());
    } else {
      routes.shm_path = static_cast<const shm::ShmPath*>(side->path.get());
    }
    STARLING_RETURN_IF_ERROR(
        transport->AdoptWritePath(std::move(side->path), side->peers));
  }
  return routes;
}

absl::StatusOr<FabricRoutes> ConnectFabric(
    InboxTransport* transport, FabricUse use,
    const std::vector<std::string>& providers, FabricOptions options,
    absl::Time deadline) {
  ConnectOptions connect;
  connect.fabric = use;
  connect.providers = providers;
  connect.fabric_options = std::move(options);
  return ConnectFabric(transport, connect, deadline);
}

}  // namespace fabric
}  // namespace transport
}  // namespace starling
