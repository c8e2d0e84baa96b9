// gpu_device.h for builds without CUDA.
#include "worker/gpu/gpu_device.h"

namespace starling {
namespace gpu {
namespace {

absl::Status NotBuilt() {
  return absl::UnavailableError(
      "built without CUDA; rebuild with --config=cuda");
}

}  // namespace

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::vector<GpuDeviceInfo>> ListGpuDevices() {
  return NotBuilt();
}

absl::StatusOr<double> RunSaxpySelfTest(int, int) { return NotBuilt(); }

}  // namespace gpu
}  // namespace starling
