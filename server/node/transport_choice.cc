#include "server/node/transport_choice.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/transport/fabric/fabric_path.h"

namespace starling {
namespace node {

absl::Status CheckTransportOptions(const NodeOptions& options) {
  if (options.transport != "auto" && options.transport != "tcp" &&
      options.transport != "fabric" && options.transport != "shm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport=", options.transport,
                     " is not one of auto, tcp, fabric, shm"));
  }
  for (const std::string& provider : options.fabric_providers) {
    if (provider.empty()) {
      return absl::InvalidArgumentError(
          "--fabric_provider has an empty name in its list");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> FabricProviders(const NodeOptions& options) {
  if (!options.fabric_providers.empty()) return options.fabric_providers;
  return {"verbs", "efa"};
}

absl::Status ProbeForcedFabric(const NodeOptions& options) {
  if (options.transport != "fabric") return absl::OkStatus();
  transport::fabric::FabricOptions fabric;
  fabric.host = options.data_host;
  fabric.verbs_style = options.fabric_verbs_style;
  std::vector<std::string> errors;
  for (const std::string& provider : FabricProviders(options)) {
    fabric.provider = provider;
    absl::StatusOr<std::unique_ptr<transport::fabric::FabricPath>> path =
        transport::fabric::FabricPath::Open(
            fabric, 0, 2, [](int r) { return absl::StrCat("rank ", r); });
    if (path.ok()) return absl::OkStatus();
    errors.push_back(std::string(path.status().message()));
  }
  return absl::UnavailableError(absl::StrCat(
      "--transport=", options.transport, ", but ", absl::StrJoin(errors, "; "),
      "; ulimit -l is ", transport::fabric::MemlockLimitText(),
      " (see deploy/FABRIC.md; --transport=auto falls back to TCP)"));
}

transport::fabric::ConnectOptions ConnectOptionsFor(
    const NodeOptions& options) {
  using transport::fabric::FabricUse;
  transport::fabric::ConnectOptions connect;
  connect.providers = FabricProviders(options);
  connect.fabric_options.host = options.data_host;
  connect.fabric_options.verbs_style = options.fabric_verbs_style;
  connect.host_id = transport::fabric::LocalHostId();
  connect.fabric = FabricUse::kAuto;
  connect.shm = FabricUse::kAuto;
  if (options.transport == "tcp") {
    connect.fabric = FabricUse::kOff;
    connect.shm = FabricUse::kOff;
  } else if (options.transport == "fabric") {
    connect.fabric = FabricUse::kRequired;
    connect.shm = FabricUse::kOff;
  } else if (options.transport == "shm") {
    connect.fabric = FabricUse::kOff;
    connect.shm = FabricUse::kRequired;
  }
  return connect;
}

std::string TransportSummary(const std::vector<std::string>& peer_transports) {
  std::map<std::string, int> counts;
  for (const std::string& name : peer_transports) {
    if (!name.empty()) ++counts[name];
  }
  if (counts.empty()) return "none";
  std::vector<std::string> parts;
  for (const auto& [name, count] : counts) {
    parts.push_back(
        absl::StrCat(name, " to ", count, count == 1 ? " peer" : " peers"));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace node
}  // namespace starling
