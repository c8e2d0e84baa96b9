#include "worker/gpu/gpu_device.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace gpu {
namespace {

using ::testing::HasSubstr;

TEST(GpuDevice, WithoutCudaEveryCallSaysHowToGetIt) {
  if (BuiltWithCuda()) GTEST_SKIP() << "built with CUDA";
  EXPECT_THAT(ListGpuDevices(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("rebuild with --config=cuda")));
  EXPECT_THAT(RunSaxpySelfTest(0, 16),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(GpuDevice, WithCudaSaxpyIsExactOnEveryDevice) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  auto devices = ListGpuDevices();
  if (!devices.ok()) {
    // No GPU on this machine: the reason must say so, then skip.
    ASSERT_THAT(devices, StatusIs(absl::StatusCode::kNotFound,
                                  HasSubstr("no CUDA device")));
    GTEST_SKIP() << devices.status().message();
  }
  ASSERT_FALSE(devices->empty());
  for (const GpuDeviceInfo& d : *devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.memory_bytes, 0u);
    // Sizes that are not a multiple of the block size, and a large one.
    for (int n : {1, 255, 257, 1 << 20}) {
      EXPECT_OK(RunSaxpySelfTest(d.index, n)) << "device " << d.index;
    }
  }
  EXPECT_THAT(RunSaxpySelfTest(0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpu
}  // namespace starling
