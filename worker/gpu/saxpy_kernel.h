// A tiny CUDA kernel (y = a*x + y) used to prove the GPU path end to end:
// nvcc-compiled device code, launched from host code built by the C++
// toolchain. Only built with --config=cuda.
#ifndef STARLING_WORKER_GPU_SAXPY_KERNEL_H_
#define STARLING_WORKER_GPU_SAXPY_KERNEL_H_

#include <cuda_runtime_api.h>

namespace starling {
namespace gpu {

// Enqueues y[i] = a * x[i] + y[i] for i < n on `stream`. x and y are device
// pointers. Returns the launch error, if any.
cudaError_t LaunchSaxpy(float a, const float* x, float* y, int n,
                        cudaStream_t stream);

}  // namespace gpu
}  // namespace starling

#endif  // STARLING_WORKER_GPU_SAXPY_KERNEL_H_
