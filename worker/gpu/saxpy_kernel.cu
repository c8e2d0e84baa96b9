#include "worker/gpu/saxpy_kernel.h"

namespace starling {
namespace gpu {
namespace {

__global__ void SaxpyKernel(float a, const float* x, float* y, int n) {
  // Grid-stride loop: any grid size covers any n.
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

}  // namespace

cudaError_t LaunchSaxpy(float a, const float* x, float* y, int n,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  int blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  SaxpyKernel<<<blocks, kThreads, 0, stream>>>(a, x, y, n);
  return cudaGetLastError();
}

}  // namespace gpu
}  // namespace starling
