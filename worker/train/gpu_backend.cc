// GpuBackend (see gpu_backend.h). GEMM is in gpu_blas.cu. Convolutions keep
// one ConvPlan (gpu_conv_plan.h) per Conv2dShape, with one workspace buffer
// shared by all plans and grown on demand.
#include "worker/train/gpu_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/train/gpu_conv_plan.h"
#include "worker/train/gpu_kernels.h"

namespace starling {
namespace train {
namespace {

// ReLU runs over tensors of at most this many elements at a time (cuDNN's
// dimensions are int).
constexpr size_t kMaxElementwiseChunk = size_t{1} << 30;

const float kOne = 1.0f;
const float kZero = 0.0f;

bool ValidPool(const Pool2dShape& s) {
  return s.batch >= 0 && s.channels >= 0 && s.height >= 0 && s.width >= 0;
}

std::string CudaErrorString(cudaError_t error) {
  return absl::StrCat(cudaGetErrorName(error), " (", cudaGetErrorString(error),
                      ")");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateGpuBackend() {
  absl::StatusOr<std::unique_ptr<GpuBackend>> gpu = GpuBackend::Create();
  if (!gpu.ok()) return gpu.status();
  return std::unique_ptr<Backend>(*std::move(gpu));
}

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clears the error; it is reported below
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount says ", CudaErrorString(error)));
  }
  if (count == 0) {
    return absl::UnavailableError(
        "no CUDA device: cudaGetDeviceCount says 0 devices");
  }
  std::unique_ptr<GpuBackend> backend(new GpuBackend());
  const absl::Status init = backend->Init();
  if (!init.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot use the CUDA device: ", init.message()));
  }
  return backend;
}

absl::Status GpuBackend::Init() {
  cudaDeviceProp prop;
  if (!Ok(cudaGetDevice(&device_), "cudaGetDevice") ||
      !Ok(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties") ||
      !Ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags") ||
      !Ok(BlasCreate(stream_, &cublas_)) ||
      !Ok(cudnnCreate(&cudnn_), "cudnnCreate") ||
      !Ok(cudnnSetStream(cudnn_, stream_), "cudnnSetStream") ||
      !Ok(cudnnCreateTensorDescriptor(&tensor_a_),
          "cudnnCreateTensorDescriptor") ||
      !Ok(cudnnCreateTensorDescriptor(&tensor_b_),
          "cudnnCreateTensorDescriptor") ||
      !Ok(cudnnCreateActivationDescriptor(&relu_),
          "cudnnCreateActivationDescriptor") ||
      !Ok(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU,
                                       CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor") ||
      !Ok(cudnnCreatePoolingDescriptor(&pool_),
          "cudnnCreatePoolingDescriptor") ||
      !Ok(cudnnSetPooling2dDescriptor(pool_, CUDNN_POOLING_MAX_DETERMINISTIC,
                                      CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2,
                                      2),
          "cudnnSetPooling2dDescriptor")) {
    return status_;
  }
  const size_t cudnn_version = cudnnGetVersion();
  if (cudnn_version / 10000 != CUDNN_MAJOR) {
    return absl::FailedPreconditionError(absl::StrCat(
        "libcudnn version ", cudnn_version, " does not match the cuDNN ",
        CUDNN_MAJOR, " headers this was built with"));
  }
  int cublas_version = 0;
  if (!Ok(BlasVersion(cublas_, &cublas_version))) {
    return status_;
  }
  name_ = absl::StrCat(
      "gpu (", prop.name, ", device ", device_, ", sm_", prop.major, prop.minor,
      ", cuDNN ", cudnn_version / 10000, ".", cudnn_version % 10000 / 100, ".",
      cudnn_version % 100, ", cuBLAS ", cublas_version, ")");
  return absl::OkStatus();
}

GpuBackend::~GpuBackend() {
  // Teardown errors are ignored: the backend is going away and there is no
  // caller left to report them to.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (pool_ != nullptr) cudnnDestroyPoolingDescriptor(pool_);
  if (relu_ != nullptr) cudnnDestroyActivationDescriptor(relu_);
  if (tensor_b_ != nullptr) cudnnDestroyTensorDescriptor(tensor_b_);
  if (tensor_a_ != nullptr) cudnnDestroyTensorDescriptor(tensor_a_);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  BlasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

// ---- Errors
// ------------------------------------------------------------------

void GpuBackend::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

bool GpuBackend::Ok(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return true;
  cudaGetLastError();  // clears a non-sticky error so later launches are clean
  Fail(absl::InternalError(absl::StrCat("gpu backend: ", call,
                                        " failed: ", CudaErrorString(error))));
  return false;
}

bool GpuBackend::Ok(const BlasStatus& status) {
  if (status.ok()) return true;
  Fail(absl::InternalError(absl::StrCat("gpu backend: ", status.call,
                                        " failed: ", status.name, " (",
                                        status.description, ")")));
  return false;
}

bool GpuBackend::Ok(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  Fail(CudnnError(status, call));
  return false;
}

bool GpuBackend::SetTensor(cudnnTensorDescriptor_t desc, int n, int c, int h,
                           int w) {
  return Ok(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW,
                                       CUDNN_DATA_FLOAT, n, c, h, w),
            "cudnnSetTensor4dDescriptor");
}

// ---- Memory
// ------------------------------------------------------------------

absl::StatusOr<void*> GpuBackend::Allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error == cudaSuccess) return ptr;
  cudaGetLastError();  // an allocation failure is not sticky in CUDA either
  const std::string message =
      absl::StrCat("gpu backend: cudaMalloc of ", bytes,
                   " bytes failed: ", CudaErrorString(error));
  if (error == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

void GpuBackend::Free(void* ptr) {
  if (ptr == nullptr) return;
  // Kernels still queued may use ptr.
  Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  Ok(cudaFree(ptr), "cudaFree");
}

absl::Status GpuBackend::CopyIn(void* dst, const void* host_src, size_t bytes) {
  if (!status_.ok() || bytes == 0) return status_;
  // Synchronous so that the host buffer may be reused at once.
  if (Ok(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_),
         "cudaMemcpyAsync (host to device)")) {
    Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  return status_;
}

absl::Status GpuBackend::CopyOut(void* host_dst, const void* src,
                                 size_t bytes) {
  if (!status_.ok()) return status_;
  if (bytes == 0) return Synchronize();
  if (Ok(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_),
         "cudaMemcpyAsync (device to host)")) {
    Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  return status_;
}

absl::Status GpuBackend::Synchronize() {
  if (status_.ok()) Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return status_;
}

void GpuBackend::Zero(float* x, size_t n) {
  if (!status_.ok() || n == 0) return;
  Ok(cudaMemsetAsync(x, 0, n * sizeof(float), stream_), "cudaMemsetAsync");
}

void* GpuBackend::Workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return workspace_;
  // Kernels still queued may use the old buffer.
  if (!Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize")) {
    return nullptr;
  }
  if (workspace_ != nullptr && !Ok(cudaFree(workspace_), "cudaFree")) {
    return nullptr;
  }
  workspace_ = nullptr;
  workspace_bytes_ = 0;
  if (!Ok(cudaMalloc(&workspace_, bytes), "cudaMalloc (cuDNN workspace)")) {
    workspace_ = nullptr;
    return nullptr;
  }
  workspace_bytes_ = bytes;
  return workspace_;
}

float* GpuBackend::Scratch(size_t elements) {
  if (elements <= scratch_elements_) return scratch_;
  if (!Ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize")) {
    return nullptr;
  }
  if (scratch_ != nullptr && !Ok(cudaFree(scratch_), "cudaFree")) {
    return nullptr;
  }
  scratch_ = nullptr;
  scratch_elements_ = 0;
  void* p = nullptr;
  if (!Ok(cudaMalloc(&p, elements * sizeof(float)), "cudaMalloc (scratch)")) {
    return nullptr;
  }
  scratch_ = static_cast<float*>(p);
  scratch_elements_ = elements;
  return scratch_;
}

// ---- Dense
// -------------------------------------------------------------------

void GpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                      float alpha, const float* a, const float* b, float beta,
                      float* c) {
  if (!status_.ok()) return;
  if (m < 0 || n < 0 || k < 0) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("gpu backend: Gemm with m ", m, ", n ", n, ", k ", k)));
    return;
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {
    const size_t elements = static_cast<size_t>(m) * n;
    if (beta == 0.0f) {
      Zero(c, elements);
    } else if (elements > INT_MAX) {
      Fail(absl::InvalidArgumentError(
          absl::StrCat("gpu backend: Gemm with k 0 scales ", elements,
                       " elements, more than cublasSscal takes")));
    } else {
      Ok(BlasSscal(cublas_, static_cast<int>(elements), beta, c));
    }
    return;
  }
  Ok(BlasSgemm(cublas_, trans_a, trans_b, m, n, k, alpha, a, b, beta, c));
}

void GpuBackend::AddBias(const float* bias, int outer, int channels, int inner,
                         float* y) {
  if (!status_.ok() || outer == 0 || channels == 0 || inner == 0) return;
  if (!SetTensor(tensor_a_, 1, channels, 1, 1) ||
      !SetTensor(tensor_b_, outer, channels, inner, 1)) {
    return;
  }
  Ok(cudnnAddTensor(cudnn_, &kOne, tensor_a_, bias, &kOne, tensor_b_, y),
     "cudnnAddTensor");
}

void GpuBackend::BiasGradient(const float* dy, int outer, int channels,
                              int inner, float* db) {
  if (!status_.ok() || channels == 0) return;
  if (outer == 0 || inner == 0) {
    Zero(db, channels);
    return;
  }
  if (!SetTensor(tensor_a_, outer, channels, inner, 1) ||
      !SetTensor(tensor_b_, 1, channels, 1, 1)) {
    return;
  }
  Ok(cudnnConvolutionBackwardBias(cudnn_, &kOne, tensor_a_, dy, &kZero,
                                  tensor_b_, db),
     "cudnnConvolutionBackwardBias");
}

// ---- Activations
// -------------------------------------------------------------

void GpuBackend::ReluForward(const float* x, float* y, size_t n) {
  for (size_t done = 0; done < n && status_.ok();) {
    const size_t chunk = std::min(n - done, kMaxElementwiseChunk);
    if (!SetTensor(tensor_a_, 1, 1, 1, static_cast<int>(chunk))) return;
    Ok(cudnnActivationForward(cudnn_, relu_, &kOne, tensor_a_, x + done, &kZero,
                              tensor_a_, y + done),
       "cudnnActivationForward");
    done += chunk;
  }
}

void GpuBackend::ReluBackward(const float* y, const float* dy, float* dx,
                              size_t n) {
  // For ReLU, y > 0 exactly where x > 0, so y stands in for the input x.
  for (size_t done = 0; done < n && status_.ok();) {
    const size_t chunk = std::min(n - done, kMaxElementwiseChunk);
    if (!SetTensor(tensor_a_, 1, 1, 1, static_cast<int>(chunk))) return;
    Ok(cudnnActivationBackward(cudnn_, relu_, &kOne, tensor_a_, y + done,
                               tensor_a_, dy + done, tensor_a_, y + done,
                               &kZero, tensor_a_, dx + done),
       "cudnnActivationBackward");
    done += chunk;
  }
}

// ---- Convolution
// -------------------------------------------------------------

ConvPlan* GpuBackend::Plan(const Conv2dShape& s, const char* op) {
  const ConvKey key = {s.batch,        s.in_channels, s.height, s.width,
                       s.out_channels, s.kernel,      s.padding};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<ConvPlan>> plan = CreateConvPlan(cudnn_, s);
  if (!plan.ok()) {
    Fail(absl::Status(plan.status().code(),
                      absl::StrCat(plan.status().message(), " (in ", op, ")")));
    return nullptr;
  }
  ConvPlan* raw = plan->get();
  plans_.emplace(key, *std::move(plan));
  return raw;
}

void GpuBackend::Conv2dForward(const Conv2dShape& s, const float* x,
                               const float* w, float* y) {
  if (!status_.ok()) return;
  if (!ValidConv2dShape(s)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "gpu backend: Conv2dForward with bad shape ", Conv2dShapeString(s))));
    return;
  }
  if (s.batch == 0) return;
  ConvPlan* plan = Plan(s, "Conv2dForward");
  if (plan == nullptr) return;
  void* workspace = Workspace(plan->fwd_bytes);
  if (plan->fwd_bytes > 0 && workspace == nullptr) return;
  if (!Ok(cudnnSetConvolutionMathType(plan->conv, plan->fwd_math),
          "cudnnSetConvolutionMathType")) {
    return;
  }
  Ok(cudnnConvolutionForward(cudnn_, &kOne, plan->x, x, plan->w, w, plan->conv,
                             plan->fwd_algo, workspace, plan->fwd_bytes, &kZero,
                             plan->y, y),
     "cudnnConvolutionForward");
}

void GpuBackend::Conv2dBackwardData(const Conv2dShape& s, const float* w,
                                    const float* dy, float* dx) {
  if (!status_.ok()) return;
  if (!ValidConv2dShape(s)) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("gpu backend: Conv2dBackwardData with bad shape ",
                     Conv2dShapeString(s))));
    return;
  }
  if (s.batch == 0) return;
  ConvPlan* plan = Plan(s, "Conv2dBackwardData");
  if (plan == nullptr) return;
  void* workspace = Workspace(plan->data_bytes);
  if (plan->data_bytes > 0 && workspace == nullptr) return;
  if (!Ok(cudnnSetConvolutionMathType(plan->conv, plan->data_math),
          "cudnnSetConvolutionMathType")) {
    return;
  }
  Ok(cudnnConvolutionBackwardData(cudnn_, &kOne, plan->w, w, plan->y, dy,
                                  plan->conv, plan->data_algo, workspace,
                                  plan->data_bytes, &kZero, plan->x, dx),
     "cudnnConvolutionBackwardData");
}

void GpuBackend::Conv2dBackwardFilter(const Conv2dShape& s, const float* x,
                                      const float* dy, float* dw) {
  if (!status_.ok()) return;
  if (!ValidConv2dShape(s)) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("gpu backend: Conv2dBackwardFilter with bad shape ",
                     Conv2dShapeString(s))));
    return;
  }
  if (s.batch == 0) {
    Zero(dw, s.filter_elements());
    return;
  }
  ConvPlan* plan = Plan(s, "Conv2dBackwardFilter");
  if (plan == nullptr) return;
  void* workspace = Workspace(plan->filter_bytes);
  if (plan->filter_bytes > 0 && workspace == nullptr) return;
  if (!Ok(cudnnSetConvolutionMathType(plan->conv, plan->filter_math),
          "cudnnSetConvolutionMathType")) {
    return;
  }
  Ok(cudnnConvolutionBackwardFilter(cudnn_, &kOne, plan->x, x, plan->y, dy,
                                    plan->conv, plan->filter_algo, workspace,
                                    plan->filter_bytes, &kZero, plan->w, dw),
     "cudnnConvolutionBackwardFilter");
}

// ---- Pooling
// -----------------------------------------------------------------

void GpuBackend::MaxPool2dForward(const Pool2dShape& s, const float* x,
                                  float* y) {
  if (!status_.ok()) return;
  if (!ValidPool(s)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "gpu backend: MaxPool2dForward with bad shape batch ", s.batch,
        ", channels ", s.channels, ", ", s.height, "x", s.width)));
    return;
  }
  if (s.output_elements() == 0) return;
  if (!SetTensor(tensor_a_, s.batch, s.channels, s.height, s.width) ||
      !SetTensor(tensor_b_, s.batch, s.channels, s.out_height(),
                 s.out_width())) {
    return;
  }
  Ok(cudnnPoolingForward(cudnn_, pool_, &kOne, tensor_a_, x, &kZero, tensor_b_,
                         y),
     "cudnnPoolingForward");
}

void GpuBackend::MaxPool2dBackward(const Pool2dShape& s, const float* x,
                                   const float* y, const float* dy, float* dx) {
  if (!status_.ok()) return;
  if (!ValidPool(s)) {
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "gpu backend: MaxPool2dBackward with bad shape batch ", s.batch,
        ", channels ", s.channels, ", ", s.height, "x", s.width)));
    return;
  }
  // Not cudnnPoolingBackward: cuDNN does not promise backend.h's tie rule
  // (the first maximum in row-major order gets the gradient).
  Ok(LaunchMaxPool2dBackward(static_cast<size_t>(s.batch) * s.channels,
                             s.height, s.width, x, y, dy, dx, stream_),
     "MaxPool2dBackward kernel launch");
}

// ---- Loss
// --------------------------------------------------------------------

void GpuBackend::SoftmaxCrossEntropy(const float* logits, const uint8_t* labels,
                                     int batch, int classes, float* loss,
                                     float* grad_logits) {
  if (!status_.ok()) return;
  if (batch < 1 || classes < 1) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("gpu backend: SoftmaxCrossEntropy with batch ", batch,
                     ", classes ", classes)));
    return;
  }
  float* log_probs = Scratch(static_cast<size_t>(batch) * classes);
  if (log_probs == nullptr) return;
  if (!SetTensor(tensor_a_, batch, classes, 1, 1) ||
      !Ok(cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_LOG,
                              CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, tensor_a_,
                              logits, &kZero, tensor_a_, log_probs),
          "cudnnSoftmaxForward")) {
    return;
  }
  Ok(LaunchCrossEntropyFromLogSoftmax(log_probs, labels, batch, classes, loss,
                                      grad_logits, stream_),
     "cross-entropy kernel launch");
}

void GpuBackend::CountCorrect(const float* logits, const uint8_t* labels,
                              int batch, int classes, int32_t* correct) {
  if (!status_.ok()) return;
  if (batch < 0 || classes < 1) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("gpu backend: CountCorrect with batch ", batch,
                     ", classes ", classes)));
    return;
  }
  Ok(LaunchCountCorrect(logits, labels, batch, classes, correct, stream_),
     "CountCorrect kernel launch");
}

}  // namespace train
}  // namespace starling
