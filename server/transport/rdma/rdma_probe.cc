#include "server/transport/rdma/rdma_probe.h"

#include <errno.h>
#include <infiniband/verbs.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace transport {
namespace rdma {

absl::StatusOr<std::vector<RdmaDevice>> ProbeRdmaDevices() {
  int count = 0;
  errno = 0;
  struct ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    const int err = errno;
    return absl::UnavailableError(
        absl::StrCat("no RDMA device found; using TCP (ibv_get_device_list: ",
                     err == 0 ? "no verbs provider" : std::strerror(err), ")"));
  }
  std::vector<RdmaDevice> devices;
  for (int i = 0; i < count; ++i) {
    RdmaDevice device;
    const char* name = ibv_get_device_name(list[i]);
    device.name = name != nullptr ? name : "?";
    device.guid = absl::StrFormat(
        "%016x", static_cast<uint64_t>(ibv_get_device_guid(list[i])));
    devices.push_back(std::move(device));
  }
  ibv_free_device_list(list);
  if (devices.empty()) {
    return absl::UnavailableError("no RDMA device found; using TCP");
  }
  return devices;
}

TransportChoice SelectTransportKind(
    const absl::StatusOr<std::vector<RdmaDevice>>& probe) {
  TransportChoice choice;
  choice.kind = TransportKind::kTcp;
  if (!probe.ok()) {
    choice.reason = std::string(probe.status().message());
    return choice;
  }
  std::vector<std::string> names;
  for (const RdmaDevice& device : *probe) names.push_back(device.name);
  choice.reason =
      absl::StrCat("RDMA device(s) ", absl::StrJoin(names, ", "),
                   " found, but this build has no RDMA transport; using TCP");
  return choice;
}

}  // namespace rdma
}  // namespace transport
}  // namespace starling
