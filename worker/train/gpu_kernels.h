// The few kernels of the GPU backend that cuDNN and cuBLAS do not provide:
// max-pooling backward with the backend's tie rule, the cross-entropy loss and
// gradient from cuDNN's log-softmax, and the count of correct predictions.
// Compiled by nvcc (cuda_library); only built with --config=cuda.
//
// Every launcher enqueues on `stream` and returns the launch error, if any;
// pointers are device pointers.
#ifndef STARLING_WORKER_TRAIN_GPU_KERNELS_H_
#define STARLING_WORKER_TRAIN_GPU_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace starling {
namespace train {

// dx = dy routed to the first position (row-major) of each 2x2 window that
// holds the window's maximum y, zero elsewhere (odd last rows and columns
// included). x, dx: [planes, height, width]; y, dy: [planes, height / 2,
// width / 2].
cudaError_t LaunchMaxPool2dBackward(size_t planes, int height, int width,
                                    const float* x, const float* y,
                                    const float* dy, float* dx,
                                    cudaStream_t stream);

// From log_probs = log softmax(logits) [batch, classes]:
//   loss[0] = -mean over b of log_probs[b, labels[b]]
//   grad_logits[b, c] = (exp(log_probs[b, c]) - (c == labels[b])) / batch,
// skipped when grad_logits is nullptr. A label >= classes gives a NaN loss.
cudaError_t LaunchCrossEntropyFromLogSoftmax(const float* log_probs,
                                             const uint8_t* labels, int batch,
                                             int classes, float* loss,
                                             float* grad_logits,
                                             cudaStream_t stream);

// correct[0] = number of b whose first maximal logit is labels[b].
cudaError_t LaunchCountCorrect(const float* logits, const uint8_t* labels,
                               int batch, int classes, int32_t* correct,
                               cudaStream_t stream);

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_GPU_KERNELS_H_
