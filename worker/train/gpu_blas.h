// The cuBLAS calls of the GPU backend behind a header free of cuBLAS types.
// cublas_v2.h includes cuda_fp16.h, which includes <nv/target>, a header
// without extension that @local_cuda//:headers does not export, so only
// nvcc-compiled code (gpu_blas.cu, which sees the toolkit's include directory
// directly) includes cuBLAS. Only built with --config=cuda.
#ifndef STARLING_WORKER_TRAIN_GPU_BLAS_H_
#define STARLING_WORKER_TRAIN_GPU_BLAS_H_

#include <cuda_runtime_api.h>

namespace starling {
namespace train {

// The outcome of a cuBLAS call.
struct BlasStatus {
  int code = 0;                  // cublasStatus_t; 0 is success
  const char* call = "";         // the cuBLAS function that failed
  const char* name = "";         // cublasGetStatusName
  const char* description = "";  // cublasGetStatusString
  bool ok() const { return code == 0; }
};

// A cublasHandle_t.
struct BlasHandle;

// cublasCreate, then cublasSetStream(stream) and CUBLAS_DEFAULT_MATH (FP32,
// no TF32). *handle is nullptr on failure.
BlasStatus BlasCreate(cudaStream_t stream, BlasHandle** handle);
// cublasDestroy; nullptr is a no-op.
void BlasDestroy(BlasHandle* handle);
// cublasGetVersion.
BlasStatus BlasVersion(BlasHandle* handle, int* version);
// Row-major C [m, n] = alpha * op(A) * op(B) + beta * C, as Backend::Gemm;
// m, n, k >= 1. cublasSgemm with the operands swapped.
BlasStatus BlasSgemm(BlasHandle* handle, bool trans_a, bool trans_b, int m,
                     int n, int k, float alpha, const float* a, const float* b,
                     float beta, float* c);
// x[i] *= alpha for i < n (cublasSscal).
BlasStatus BlasSscal(BlasHandle* handle, int n, float alpha, float* x);

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_GPU_BLAS_H_
