// GpuBackend: the Backend on one CUDA device, with one stream, one cuBLAS
// handle and one cuDNN handle. GEMMs go to cublasSgemm (through
// gpu_blas.h); convolutions, bias,
// ReLU, max-pooling forward and softmax to cuDNN's legacy API; max-pooling
// backward (with backend.h's tie rule), the cross-entropy loss and gradient,
// and the correct count are small kernels (gpu_kernels.h). Only built with
// --config=cuda; create it with CreateGpuBackend() (backend.h).
//
// Kernels are enqueued on the stream and return at once. The first failing
// CUDA, cuBLAS or cuDNN call (or a bad shape) sets a sticky status: later
// kernels are skipped, and CopyIn, CopyOut and Synchronize return it.
//
// FP32 throughout: cuBLAS in CUBLAS_DEFAULT_MATH and cuDNN convolutions in
// CUDNN_FMA_MATH where possible, so no TF32 rounding; results match the CPU
// backend to ~1e-5 relative (reduction order differs).
//
// Thread safety: thread-compatible (see backend.h).
#ifndef STARLING_WORKER_TRAIN_GPU_BACKEND_H_
#define STARLING_WORKER_TRAIN_GPU_BACKEND_H_

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/train/backend.h"
#include "worker/train/gpu_blas.h"
#include "worker/train/gpu_conv_plan.h"

namespace starling {
namespace train {

class GpuBackend : public Backend {
 public:
  // Uses the current CUDA device. Unavailable when there is none or a handle
  // cannot be created.
  static absl::StatusOr<std::unique_ptr<GpuBackend>> Create();

  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;
  ~GpuBackend() override;

  // "gpu (NVIDIA H100 80GB HBM3, device 0, sm_90, cuDNN 9.19.0, cuBLAS
  // 130100)".
  std::string name() const override { return name_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  absl::Status CopyIn(void* dst, const void* host_src, size_t bytes) override;
  absl::Status CopyOut(void* host_dst, const void* src, size_t bytes) override;
  absl::Status Synchronize() override;
  void Zero(float* x, size_t n) override;

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  void AddBias(const float* bias, int outer, int channels, int inner,
               float* y) override;
  void BiasGradient(const float* dy, int outer, int channels, int inner,
                    float* db) override;

  void ReluForward(const float* x, float* y, size_t n) override;
  void ReluBackward(const float* y, const float* dy, float* dx,
                    size_t n) override;

  void Conv2dForward(const Conv2dShape& shape, const float* x, const float* w,
                     float* y) override;
  void Conv2dBackwardData(const Conv2dShape& shape, const float* w,
                          const float* dy, float* dx) override;
  void Conv2dBackwardFilter(const Conv2dShape& shape, const float* x,
                            const float* dy, float* dw) override;

  void MaxPool2dForward(const Pool2dShape& shape, const float* x,
                        float* y) override;
  void MaxPool2dBackward(const Pool2dShape& shape, const float* x,
                         const float* y, const float* dy, float* dx) override;

  void SoftmaxCrossEntropy(const float* logits, const uint8_t* labels,
                           int batch, int classes, float* loss,
                           float* grad_logits) override;
  void CountCorrect(const float* logits, const uint8_t* labels, int batch,
                    int classes, int32_t* correct) override;

 private:
  using ConvKey = std::array<int, 7>;

  GpuBackend() = default;
  absl::Status Init();

  // Each returns true on success; on failure it records the sticky error
  // (naming `call` and the library's error string) unless one is set.
  bool Ok(cudaError_t error, const char* call);
  bool Ok(const BlasStatus& status);
  bool Ok(cudnnStatus_t status, const char* call);
  void Fail(absl::Status status);

  // The plan for `shape` (made on first use and kept), or nullptr after
  // recording an error.
  ConvPlan* Plan(const Conv2dShape& shape, const char* op);
  // Device scratch of at least `bytes`, grown on demand; nullptr on error.
  void* Workspace(size_t bytes);
  float* Scratch(size_t elements);
  // Sets tensor_a_ (and so on) to NCHW [n, c, h, w]; false on error.
  bool SetTensor(cudnnTensorDescriptor_t desc, int n, int c, int h, int w);

  std::string name_ = "gpu";
  int device_ = 0;
  absl::Status status_;
  cudaStream_t stream_ = nullptr;
  BlasHandle* cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  // Reusable descriptors for the non-convolution ops (set per call).
  cudnnTensorDescriptor_t tensor_a_ = nullptr;
  cudnnTensorDescriptor_t tensor_b_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;

  std::map<ConvKey, std::unique_ptr<ConvPlan>> plans_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float* scratch_ = nullptr;
  size_t scratch_elements_ = 0;
};

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_GPU_BACKEND_H_
