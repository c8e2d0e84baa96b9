// CUDA kernels of the GPU backend (see gpu_kernels.h). The reductions run in
// one block with a fixed shared-memory tree, so results do not depend on
// scheduling.
#include <math.h>

#include "worker/train/gpu_kernels.h"

namespace starling {
namespace train {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

int BlocksFor(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return blocks > kMaxBlocks ? kMaxBlocks : static_cast<int>(blocks);
}

__global__ void MaxPool2dBackwardKernel(size_t total, int height, int width,
                                        const float* x, const float* y,
                                        const float* dy, float* dx) {
  const int oh = height / 2, ow = width / 2;
  const size_t plane_size = static_cast<size_t>(height) * width;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t plane = idx / plane_size;
    const int pos = static_cast<int>(idx % plane_size);
    const int r = pos / width, c = pos % width;
    const int i = r / 2, j = c / 2;
    float out = 0.0f;
    if (i < oh && j < ow) {
      const float* xp = x + plane * plane_size;
      const size_t yi = plane * oh * ow + static_cast<size_t>(i) * ow + j;
      const float m = y[yi];
      // The first position of the window in row-major order holding m (the
      // last one if none does, as the CPU backend does).
      int at = 2 * i * width + 2 * j;
      if (xp[at] != m) {
        if (xp[at + 1] == m) {
          at += 1;
        } else if (xp[at + width] == m) {
          at += width;
        } else {
          at += width + 1;
        }
      }
      if (at == pos) out = dy[yi];
    }
    dx[idx] = out;
  }
}

__global__ void CrossEntropyLossKernel(const float* log_probs,
                                       const uint8_t* labels, int batch,
                                       int classes, float* loss) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    const int label = labels[b];
    sum += label < classes
               ? -static_cast<double>(
                     log_probs[static_cast<size_t>(b) * classes + label])
               : nan("");
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] = static_cast<float>(partial[0] / batch);
}

__global__ void CrossEntropyGradKernel(const float* log_probs,
                                       const uint8_t* labels, int batch,
                                       int classes, float* grad_logits) {
  const size_t total = static_cast<size_t>(batch) * classes;
  const float inv_batch = 1.0f / static_cast<float>(batch);
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = idx / classes;
    const int c = static_cast<int>(idx % classes);
    const float p = expf(log_probs[idx]);
    grad_logits[idx] = (p - (c == labels[b] ? 1.0f : 0.0f)) * inv_batch;
  }
}

__global__ void CountCorrectKernel(const float* logits, const uint8_t* labels,
                                   int batch, int classes, int32_t* correct) {
  __shared__ int32_t partial[kThreads];
  int32_t count = 0;
  for (int b = threadIdx.x; b < batch; b += blockDim.x) {
    const float* z = logits + static_cast<size_t>(b) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    if (best == labels[b]) ++count;
  }
  partial[threadIdx.x] = count;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) correct[0] = partial[0];
}

}  // namespace

cudaError_t LaunchMaxPool2dBackward(size_t planes, int height, int width,
                                    const float* x, const float* y,
                                    const float* dy, float* dx,
                                    cudaStream_t stream) {
  const size_t total = planes * height * width;
  if (total == 0) return cudaSuccess;
  MaxPool2dBackwardKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      total, height, width, x, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t LaunchCrossEntropyFromLogSoftmax(const float* log_probs,
                                             const uint8_t* labels, int batch,
                                             int classes, float* loss,
                                             float* grad_logits,
                                             cudaStream_t stream) {
  CrossEntropyLossKernel<<<1, kThreads, 0, stream>>>(log_probs, labels, batch,
                                                     classes, loss);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess || grad_logits == nullptr) return error;
  const size_t total = static_cast<size_t>(batch) * classes;
  CrossEntropyGradKernel<<<BlocksFor(total), kThreads, 0, stream>>>(
      log_probs, labels, batch, classes, grad_logits);
  return cudaGetLastError();
}

cudaError_t LaunchCountCorrect(const float* logits, const uint8_t* labels,
                               int batch, int classes, int32_t* correct,
                               cudaStream_t stream) {
  CountCorrectKernel<<<1, kThreads, 0, stream>>>(logits, labels, batch, classes,
                                                 correct);
  return cudaGetLastError();
}

}  // namespace train
}  // namespace starling
