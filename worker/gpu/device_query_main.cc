// starling-device-query: lists the CUDA devices this build can use and runs
// a small kernel on each to prove the GPU path works.
//
//   starling-device-query            # exit 0; says "no CUDA device" if none
//   starling-device-query --require  # exit 1 when no device can be used
#include <cstdio>

#include "absl/flags/flag.h"
#include "server/base/command_line.h"
#include "server/base/version.h"
#include "worker/gpu/gpu_device.h"

ABSL_FLAG(bool, require, false,
          "exit with status 1 when no CUDA device can be used");
ABSL_FLAG(int, saxpy_elements, 1 << 24,
          "elements of the y = a*x + y self-test run on each device");

int main(int argc, char** argv) {
  starling::ParseProgramCommandLine(
      {"starling-device-query", "worker/gpu/device_query_main.cc",
       starling::kStarlingVersion,
       "Lists CUDA devices and runs a saxpy self-test on each.\n"
       "Usage: starling-device-query [--require] [--saxpy_elements=N]"},
      argc, argv);
  const bool require = absl::GetFlag(FLAGS_require);
  auto devices = starling::gpu::ListGpuDevices();
  if (!devices.ok()) {
    std::printf("%s\n", std::string(devices.status().message()).c_str());
    return require ? 1 : 0;
  }
  int failures = 0;
  for (const auto& d : *devices) {
    std::printf("device %d: %s, compute %d.%d, %d SMs, %.1f GiB\n", d.index,
                d.name.c_str(), d.compute_capability_major,
                d.compute_capability_minor, d.multiprocessors,
                d.memory_bytes / (1024.0 * 1024 * 1024));
    const int n = absl::GetFlag(FLAGS_saxpy_elements);
    auto seconds = starling::gpu::RunSaxpySelfTest(d.index, n);
    if (!seconds.ok()) {
      std::printf("  saxpy self-test failed: %s\n",
                  std::string(seconds.status().message()).c_str());
      ++failures;
      continue;
    }
    // Reads x and y, writes y: 12 bytes per element.
    std::printf("  saxpy %d elements: ok, %.3f ms, %.1f GB/s\n", n,
                *seconds * 1e3, 12.0 * n / *seconds / 1e9);
  }
  return failures == 0 ? 0 : 1;
}
