#include "server/transport/fabric/fabric_test_util.h"

#include <functional>
#include <thread>
#include <utility>

#include "server/base/status_macros.h"
#include "server/transport/tcp/tcp_test_util.h"

namespace starling {
namespace transport {
namespace fabric {

FabricOptions TestFabricOptions() {
  FabricOptions options;
  options.host = "127.0.0.1";
  options.slot_bytes = 64 << 10;
  options.slots = 4;
  return options;
}

std::vector<Transport*> FabricGroup::Raw() const {
  std::vector<Transport*> out;
  for (const auto& t : transports) out.push_back(t.get());
  return out;
}

namespace {

// A group of `n` over TCP on 127.0.0.1, each rank's paths connected by
// ConnectFabric() with `options_of(rank)`, all ranks at once.
absl::StatusOr<FabricGroup> ConnectGroup(
    int n, const std::function<ConnectOptions(int rank)>& options_of) {
  FabricGroup group;
  STARLING_ASSIGN_OR_RETURN(group.transports, tcp::CreateGroup(n));
  std::vector<absl::StatusOr<FabricRoutes>> results(
      n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[r] =
          ConnectFabric(group.transports[r].get(), options_of(r), deadline);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    STARLING_RETURN_IF_ERROR(results[r].status());
    group.routes.push_back(*std::move(results[r]));
  }
  return group;
}

}  // namespace

absl::StatusOr<FabricGroup> CreateFabricGroup(int n, bool verbs_style,
                                              std::vector<FabricUse> uses,
                                              FabricOptions options) {
  if (uses.empty()) uses.assign(n, FabricUse::kRequired);
  options.verbs_style = verbs_style;
  return ConnectGroup(n, [&](int rank) {
    ConnectOptions connect;
    connect.fabric = uses[rank];
    connect.providers = {"tcp"};
    connect.fabric_options = options;
    return connect;
  });
}

std::string PathKindName(PathKind kind) {
  switch (kind) {
    case PathKind::kAsReported:
      return "AsReported";
    case PathKind::kVerbsStyle:
      return "VerbsStyle";
    case PathKind::kShm:
      return "Shm";
    case PathKind::kShmRingsOnly:
      return "ShmRingsOnly";
  }
  return "?";
}

absl::StatusOr<FabricGroup> CreatePathGroup(int n, PathKind kind) {
  if (kind != PathKind::kShm && kind != PathKind::kShmRingsOnly) {
    return CreateFabricGroup(n, kind == PathKind::kVerbsStyle);
  }
  return ConnectGroup(n, [kind](int) {
    ConnectOptions connect;
    connect.fabric = FabricUse::kOff;
    connect.shm = FabricUse::kRequired;
    connect.shm_options.ring_bytes = 64 << 10;
    connect.shm_options.single_copy = kind == PathKind::kShm;
    connect.host_id = "this-host";
    return connect;
  });
}

}  // namespace fabric
}  // namespace transport
}  // namespace starling
