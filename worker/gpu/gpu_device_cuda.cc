// gpu_device.h on the CUDA runtime (--config=cuda).
#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/gpu/gpu_device.h"
#include "worker/gpu/saxpy_kernel.h"

namespace starling {
namespace gpu {
namespace {

absl::Status CudaError(cudaError_t error, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error),
                                          " (", cudaGetErrorString(error),
                                          ")"));
}

// Device buffers freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  cudaError_t Allocate(size_t bytes) { return cudaMalloc(&ptr_, bytes); }
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<std::vector<GpuDeviceInfo>> ListGpuDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    return absl::NotFoundError(absl::StrCat(
        "no CUDA device: ",
        error == cudaSuccess ? "the runtime sees 0 devices"
                             : absl::StrCat(cudaGetErrorName(error), " (",
                                            cudaGetErrorString(error), ")")));
  }
  std::vector<GpuDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t e = cudaGetDeviceProperties(&prop, i);
    if (e != cudaSuccess) return CudaError(e, "cudaGetDeviceProperties");
    GpuDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.compute_capability_major = prop.major;
    info.compute_capability_minor = prop.minor;
    info.memory_bytes = prop.totalGlobalMem;
    info.multiprocessors = prop.multiProcessorCount;
    devices.push_back(info);
  }
  return devices;
}

absl::StatusOr<double> RunSaxpySelfTest(int device, int n) {
  if (n <= 0) return absl::InvalidArgumentError("saxpy needs n > 0");
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000);
    y[i] = static_cast<float>(i % 7);
  }
  const size_t bytes = sizeof(float) * n;
  DeviceBuffer dx, dy;
  if ((e = dx.Allocate(bytes)) != cudaSuccess)
    return CudaError(e, "cudaMalloc");
  if ((e = dy.Allocate(bytes)) != cudaSuccess)
    return CudaError(e, "cudaMalloc");
  e = cudaMemcpy(dx.get(), x.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) {
    e = cudaMemcpy(dy.get(), y.data(), bytes, cudaMemcpyHostToDevice);
  }
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy to device");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, nullptr);
  e = LaunchSaxpy(2.0f, dx.get(), dy.get(), n, nullptr);
  cudaEventRecord(stop, nullptr);
  if (e == cudaSuccess) e = cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (e != cudaSuccess) return CudaError(e, "saxpy kernel");
  std::vector<float> out(n);
  e = cudaMemcpy(out.data(), dy.get(), bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy to host");
  for (int i = 0; i < n; ++i) {
    const float want = 2.0f * x[i] + y[i];  // exact: small integers
    if (out[i] != want) {
      return absl::InternalError(absl::StrCat("saxpy element ", i, " is ",
                                              out[i], ", expected ", want));
    }
  }
  return ms / 1e3;
}

}  // namespace gpu
}  // namespace starling
