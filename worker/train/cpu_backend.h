// CpuBackend: the Backend on host memory. GEMMs (the dense layers and the
// convolutions' inner products) go to OpenBLAS cblas_sgemm; convolutions are
// im2col + GEMM forward, GEMM + col2im for the input gradient; the rest are
// plain loops over memory. Kernels run synchronously on the calling thread
// (OpenBLAS may use its own threads inside a GEMM).
//
// Thread safety: thread-compatible (the im2col scratch buffer is a member).
#ifndef STARLING_WORKER_TRAIN_CPU_BACKEND_H_
#define STARLING_WORKER_TRAIN_CPU_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/train/backend.h"

namespace starling {
namespace train {

class CpuBackend : public Backend {
 public:
  // Convolutions lower a chunk of samples at a time into one column matrix
  // (one large GEMM per chunk instead of one small GEMM per sample); the
  // chunk is as many samples as fit in max_column_floats floats (at least
  // one). The default, 8M floats (32 MiB), holds a whole batch of 64 for
  // both of the CNN's convolutions.
  static constexpr size_t kDefaultMaxColumnFloats = size_t{8} << 20;

  explicit CpuBackend(size_t max_column_floats = kDefaultMaxColumnFloats)
      : max_column_floats_(max_column_floats) {}
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;
  ~CpuBackend() override = default;

  std::string name() const override { return "cpu"; }

  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  absl::Status CopyIn(void* dst, const void* host_src, size_t bytes) override;
  absl::Status CopyOut(void* host_dst, const void* src, size_t bytes) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }
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
  // Samples per convolution chunk for this shape.
  int ChunkSamples(const Conv2dShape& shape) const;
  // Scratch, grown on demand and kept between calls: the column matrix
  // [in_c * k * k, chunk * oh * ow] and the chunk's output or output
  // gradient in GEMM layout [out_c, chunk * oh * ow].
  float* Columns(size_t elements);
  float* Packed(size_t elements);
  // What every convolution pass sets up for `shape`: the GEMM sizes, the
  // chunk and the scratch for it.
  struct ConvWork {
    int kk = 0;     // in_c * k * k
    size_t p = 0;   // oh * ow
    int chunk = 0;  // samples per GEMM
    float* cols = nullptr;
    float* packed = nullptr;
    size_t x_stride = 0;  // input floats per sample
  };
  ConvWork Work(const Conv2dShape& shape);

  const size_t max_column_floats_;
  std::vector<float> columns_;
  std::vector<float> packed_;
};

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_CPU_BACKEND_H_
