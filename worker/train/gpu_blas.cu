// cuBLAS for the GPU backend (see gpu_blas.h). Row-major GEMM on
// column-major cuBLAS: a row-major [r, c] matrix is a column-major [c, r]
// one, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T by swapping
// the operands (and m with n); leading dimensions are the row-major row
// strides.
#include <cublas_v2.h>

#include "worker/train/gpu_blas.h"

namespace starling {
namespace train {

struct BlasHandle {
  cublasHandle_t handle = nullptr;
};

namespace {

BlasStatus Status(cublasStatus_t status, const char* call) {
  BlasStatus out;
  out.code = static_cast<int>(status);
  if (status != CUBLAS_STATUS_SUCCESS) {
    out.call = call;
    out.name = cublasGetStatusName(status);
    out.description = cublasGetStatusString(status);
  }
  return out;
}

}  // namespace

BlasStatus BlasCreate(cudaStream_t stream, BlasHandle** handle) {
  *handle = nullptr;
  cublasHandle_t h = nullptr;
  BlasStatus status = Status(cublasCreate(&h), "cublasCreate");
  if (!status.ok()) return status;
  status = Status(cublasSetStream(h, stream), "cublasSetStream");
  if (status.ok()) {
    status =
        Status(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
  }
  if (!status.ok()) {
    cublasDestroy(h);  // already failing; its own status adds nothing
    return status;
  }
  *handle = new BlasHandle{h};
  return status;
}

void BlasDestroy(BlasHandle* handle) {
  if (handle == nullptr) return;
  cublasDestroy(handle->handle);  // teardown: nobody to report to
  delete handle;
}

BlasStatus BlasVersion(BlasHandle* handle, int* version) {
  return Status(cublasGetVersion(handle->handle, version), "cublasGetVersion");
}

BlasStatus BlasSgemm(BlasHandle* handle, bool trans_a, bool trans_b, int m,
                     int n, int k, float alpha, const float* a, const float* b,
                     float beta, float* c) {
  return Status(
      cublasSgemm(handle->handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                  trans_b ? k : n, a, trans_a ? m : k, &beta, c, n),
      "cublasSgemm");
}

BlasStatus BlasSscal(BlasHandle* handle, int n, float alpha, float* x) {
  return Status(cublasSscal(handle->handle, n, &alpha, x, 1), "cublasSscal");
}

}  // namespace train
}  // namespace starling
