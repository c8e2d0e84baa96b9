// Backend: the compute kernels a model needs (GEMM, bias, ReLU, convolution,
// max pooling, softmax cross-entropy), on memory the backend owns. The CPU
// backend (cpu_backend.h) works on host memory with OpenBLAS; a GPU backend
// (gpu_backend, built only with --config=cuda) implements the same calls on
// device memory with cuBLAS and cuDNN, which is why the kernels are at the
// granularity of cuDNN's ops.
//
// Conventions for every kernel:
//   - Pointers passed to kernels are backend pointers (from Allocate), never
//     host pointers, except where a parameter says "host". A GPU backend's
//     pointers must not be dereferenced on the host.
//   - float32, dense, row-major; images are NCHW (batch, channels, height,
//     width), contiguous, innermost index last.
//   - Outputs are overwritten (not accumulated into) unless a beta says so.
//     Outputs must not alias inputs unless the method says it may.
//   - Kernels are asynchronous and return nothing: a backend may queue them
//     (a CUDA stream). A kernel failure is sticky: the next CopyOut or
//     Synchronize returns it (Internal or the device's error), and so do all
//     later ones. On the CPU backend kernels run at once and never fail.
//   - Shapes are caller invariants (REQUIRES): a backend may check them with
//     STARLING_CHECK-style aborts; validate user input before calling.
//
// Thread safety: thread-compatible. One thread drives a backend at a time
// (a GPU backend uses one stream); distinct backends are independent.
#ifndef STARLING_WORKER_TRAIN_BACKEND_H_
#define STARLING_WORKER_TRAIN_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace train {

// Shape of a 2-D convolution, NCHW, square kernel, stride 1, zero padding
// `padding` on every side, no dilation, no groups.
//   input x:  [batch, in_channels, height, width]
//   filter w: [out_channels, in_channels, kernel, kernel]
//   output y: [batch, out_channels, out_height(), out_width()]
struct Conv2dShape {
  int batch = 0;
  int in_channels = 0;
  int height = 0;
  int width = 0;
  int out_channels = 0;
  int kernel = 0;
  int padding = 0;

  int out_height() const { return height + 2 * padding - kernel + 1; }
  int out_width() const { return width + 2 * padding - kernel + 1; }
  size_t input_elements() const {
    return static_cast<size_t>(batch) * in_channels * height * width;
  }
  size_t filter_elements() const {
    return static_cast<size_t>(out_channels) * in_channels * kernel * kernel;
  }
  size_t output_elements() const {
    return static_cast<size_t>(batch) * out_channels * out_height() *
           out_width();
  }
};

// Shape of a max pooling 2x2, stride 2, no padding, NCHW.
//   input x:  [batch, channels, height, width]
//   output y: [batch, channels, height / 2, width / 2] (floor; an odd last
//             row or column is ignored, as cuDNN and PyTorch do)
struct Pool2dShape {
  int batch = 0;
  int channels = 0;
  int height = 0;
  int width = 0;

  int out_height() const { return height / 2; }
  int out_width() const { return width / 2; }
  size_t input_elements() const {
    return static_cast<size_t>(batch) * channels * height * width;
  }
  size_t output_elements() const {
    return static_cast<size_t>(batch) * channels * out_height() * out_width();
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "gpu"; for logs.
  virtual std::string name() const = 0;

  // ---- Memory --------------------------------------------------------------

  // Allocates `bytes` bytes of backend memory, aligned for float, contents
  // undefined. The caller owns it and gives it back with Free before the
  // backend is destroyed. Allocate(0) returns a valid pointer or nullptr,
  // either of which Free accepts. ResourceExhausted when out of memory.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  // Frees memory from Allocate; nullptr is a no-op. Waits for queued kernels
  // that use it.
  virtual void Free(void* ptr) = 0;
  // Copies `bytes` bytes from host memory `host_src` to backend memory `dst`.
  // The host buffer may be reused as soon as this returns.
  virtual absl::Status CopyIn(void* dst, const void* host_src,
                              size_t bytes) = 0;
  // Copies `bytes` bytes from backend memory `src` to host memory `host_dst`
  // after all queued kernels finished; blocks until the bytes are there.
  // Returns a sticky kernel error if one happened.
  virtual absl::Status CopyOut(void* host_dst, const void* src,
                               size_t bytes) = 0;
  // Waits until all queued kernels finished; returns a sticky kernel error.
  virtual absl::Status Synchronize() = 0;

  // Sets n floats at x to zero.
  virtual void Zero(float* x, size_t n) = 0;

  // ---- Dense ---------------------------------------------------------------

  // Row-major GEMM: C = alpha * op(A) * op(B) + beta * C, where op(A) is
  // [m, k] and op(B) is [k, n]; C is [m, n] with row stride n. A is stored
  // [m, k] (row stride k) when !trans_a, else [k, m] (row stride m); B is
  // stored [k, n] when !trans_b, else [n, k]. beta == 0 ignores C's old
  // contents (NaN included). m, n, k >= 0; k == 0 gives C = beta * C.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const float* a, const float* b, float beta,
                    float* c) = 0;

  // y[o, c, i] += bias[c] for y of shape [outer, channels, inner].
  // A linear layer's output [batch, features] is outer = batch,
  // channels = features, inner = 1; a convolution's NCHW output is
  // outer = batch, channels = C, inner = H * W (cudnnAddTensor).
  virtual void AddBias(const float* bias, int outer, int channels, int inner,
                       float* y) = 0;
  // db[c] = sum over o, i of dy[o, c, i] (cudnnConvolutionBackwardBias);
  // dy as in AddBias, db [channels].
  virtual void BiasGradient(const float* dy, int outer, int channels, int inner,
                            float* db) = 0;

  // ---- Activations ---------------------------------------------------------

  // y = max(x, 0) elementwise over n floats; y may equal x (in place).
  virtual void ReluForward(const float* x, float* y, size_t n) = 0;
  // dx = dy where y > 0, else 0, over n floats; y is ReluForward's output.
  // dx may equal dy (in place).
  virtual void ReluBackward(const float* y, const float* dy, float* dx,
                            size_t n) = 0;

  // ---- Convolution (NCHW, see Conv2dShape) ---------------------------------

  // y = conv(x, w), no bias (add it with AddBias, inner = out H * W).
  // x [batch, in_c, h, w], w [out_c, in_c, k, k], y [batch, out_c, oh, ow].
  virtual void Conv2dForward(const Conv2dShape& shape, const float* x,
                             const float* w, float* y) = 0;
  // dx = gradient of the loss with respect to x, given dy (same shape as y)
  // and the filter w. dx [batch, in_c, h, w].
  virtual void Conv2dBackwardData(const Conv2dShape& shape, const float* w,
                                  const float* dy, float* dx) = 0;
  // dw = gradient with respect to the filter, summed over the batch, given
  // the forward input x and dy. dw [out_c, in_c, k, k].
  virtual void Conv2dBackwardFilter(const Conv2dShape& shape, const float* x,
                                    const float* dy, float* dw) = 0;

  // ---- Pooling (2x2, stride 2, NCHW, see Pool2dShape) ----------------------

  // y[n, c, i, j] = max of x[n, c, 2i..2i+1, 2j..2j+1].
  virtual void MaxPool2dForward(const Pool2dShape& shape, const float* x,
                                float* y) = 0;
  // dx = dy routed to the position of each window's maximum (the first in
  // row-major order on ties), zero elsewhere; x and y are the forward input
  // and output (cudnnPoolingBackward's arguments). dx [batch, c, h, w].
  virtual void MaxPool2dBackward(const Pool2dShape& shape, const float* x,
                                 const float* y, const float* dy,
                                 float* dx) = 0;

  // ---- Loss ----------------------------------------------------------------

  // Softmax cross-entropy over logits [batch, classes] and labels [batch]
  // (uint8 in backend memory, each < classes):
  //   loss[0] = mean over the batch of -log softmax(logits[b])[labels[b]]
  //   grad_logits[b, c] = (softmax(logits[b])[c] - (c == labels[b])) / batch
  // computed stably (max subtracted). `loss` is a backend float[1];
  // grad_logits may be nullptr (loss only). batch >= 1.
  virtual void SoftmaxCrossEntropy(const float* logits, const uint8_t* labels,
                                   int batch, int classes, float* loss,
                                   float* grad_logits) = 0;
  // correct[0] = number of b with argmax(logits[b]) == labels[b] (first
  // maximum on ties); `correct` is a backend int32_t[1].
  virtual void CountCorrect(const float* logits, const uint8_t* labels,
                            int batch, int classes, int32_t* correct) = 0;
};

// The OpenBLAS backend on host memory (cpu_backend.cc).
std::unique_ptr<Backend> CreateCpuBackend();

// The cuBLAS/cuDNN backend (gpu_backend.cc, only built with --config=cuda).
// Unavailable when no CUDA device can be used.
absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend();

// "cpu" or "gpu" (the worker's --device flag). InvalidArgument for another
// name; Unavailable for "gpu" in a build without CUDA or without a device.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name);

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_BACKEND_H_
