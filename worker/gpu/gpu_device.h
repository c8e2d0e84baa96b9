// What GPUs this process can use, behind a plain C++ interface so that
// nothing outside worker/gpu depends on CUDA. Built with --config=cuda it
// asks the CUDA runtime; without, every call reports that CUDA is not built
// in. Thread-safe (the CUDA runtime is).
#ifndef STARLING_WORKER_GPU_GPU_DEVICE_H_
#define STARLING_WORKER_GPU_GPU_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace starling {
namespace gpu {

struct GpuDeviceInfo {
  int index = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  uint64_t memory_bytes = 0;
  int multiprocessors = 0;
};

// True when this binary was built with --config=cuda.
bool BuiltWithCuda();

// The visible CUDA devices. Unavailable when built without CUDA ("built
// without CUDA; rebuild with --config=cuda"); NotFound when CUDA is built in
// but no device or driver is present, with the CUDA runtime's reason.
absl::StatusOr<std::vector<GpuDeviceInfo>> ListGpuDevices();

// Runs y = a*x + y on `device` over `n` elements and checks every element on
// the host. Returns the kernel time. Internal if a result is wrong.
absl::StatusOr<double> RunSaxpySelfTest(int device, int n);

}  // namespace gpu
}  // namespace starling

#endif  // STARLING_WORKER_GPU_GPU_DEVICE_H_
