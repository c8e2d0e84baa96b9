// ConvPlan (see gpu_conv_plan.h).
#include "worker/train/gpu_conv_plan.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace train {
namespace {

// Index of the heuristic result to use (see gpu_conv_plan.h); -1 if none
// succeeded within the workspace limit.
template <typename Perf>
int ChooseAlgo(const Perf* perf, int count) {
  int best = -1, best_rank = 3;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS ||
        perf[i].memory > kMaxConvWorkspaceBytes) {
      continue;
    }
    const bool fma = perf[i].mathType == CUDNN_FMA_MATH;
    const bool deterministic = perf[i].determinism == CUDNN_DETERMINISTIC;
    const int rank = fma ? (deterministic ? 0 : 1) : 2;
    if (rank < best_rank) {
      best = i;
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace

ConvPlan::~ConvPlan() {
  // Destroy errors are ignored: nothing can be done about them here.
  if (x != nullptr) cudnnDestroyTensorDescriptor(x);
  if (y != nullptr) cudnnDestroyTensorDescriptor(y);
  if (w != nullptr) cudnnDestroyFilterDescriptor(w);
  if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
}

bool ValidConv2dShape(const Conv2dShape& s) {
  return s.batch >= 0 && s.in_channels >= 1 && s.height >= 1 && s.width >= 1 &&
         s.out_channels >= 1 && s.kernel >= 1 && s.padding >= 0 &&
         s.out_height() >= 1 && s.out_width() >= 1;
}

std::string Conv2dShapeString(const Conv2dShape& s) {
  return absl::StrCat("batch ", s.batch, ", in_channels ", s.in_channels, ", ",
                      s.height, "x", s.width, ", out_channels ", s.out_channels,
                      ", kernel ", s.kernel, ", padding ", s.padding);
}

absl::Status CudnnError(cudnnStatus_t status, absl::string_view call) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  return absl::InternalError(absl::StrCat(
      "gpu backend: ", call, " failed: ", cudnnGetErrorString(status),
      detail[0] != '\0' ? absl::StrCat(" (", detail, ")") : ""));
}

absl::StatusOr<std::unique_ptr<ConvPlan>> CreateConvPlan(cudnnHandle_t cudnn,
                                                         const Conv2dShape& s) {
  const std::string what = absl::StrCat(" for ", Conv2dShapeString(s));
  absl::Status error;
  auto ok = [&](cudnnStatus_t status, const char* call) {
    if (status == CUDNN_STATUS_SUCCESS) return true;
    error = CudnnError(status, absl::StrCat(call, what));
    return false;
  };
  auto plan = std::make_unique<ConvPlan>();
  if (!ok(cudnnCreateTensorDescriptor(&plan->x),
          "cudnnCreateTensorDescriptor") ||
      !ok(cudnnCreateTensorDescriptor(&plan->y),
          "cudnnCreateTensorDescriptor") ||
      !ok(cudnnCreateFilterDescriptor(&plan->w),
          "cudnnCreateFilterDescriptor") ||
      !ok(cudnnCreateConvolutionDescriptor(&plan->conv),
          "cudnnCreateConvolutionDescriptor") ||
      !ok(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW,
                                     CUDNN_DATA_FLOAT, s.batch, s.in_channels,
                                     s.height, s.width),
          "cudnnSetTensor4dDescriptor") ||
      !ok(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW,
                                     CUDNN_DATA_FLOAT, s.batch, s.out_channels,
                                     s.out_height(), s.out_width()),
          "cudnnSetTensor4dDescriptor") ||
      !ok(cudnnSetFilter4dDescriptor(plan->w, CUDNN_DATA_FLOAT,
                                     CUDNN_TENSOR_NCHW, s.out_channels,
                                     s.in_channels, s.kernel, s.kernel),
          "cudnnSetFilter4dDescriptor") ||
      // Cross-correlation, as the CPU backend (and PyTorch) compute.
      !ok(cudnnSetConvolution2dDescriptor(plan->conv, s.padding, s.padding, 1,
                                          1, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT),
          "cudnnSetConvolution2dDescriptor") ||
      !ok(cudnnSetConvolutionMathType(plan->conv, CUDNN_FMA_MATH),
          "cudnnSetConvolutionMathType")) {
    return error;
  }

  int returned = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  if (!ok(cudnnGetConvolutionForwardAlgorithm_v7(
              cudnn, plan->x, plan->w, plan->conv, plan->y,
              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, fwd),
          "cudnnGetConvolutionForwardAlgorithm_v7")) {
    return error;
  }
  int best = ChooseAlgo(fwd, returned);
  if (best < 0) {
    return absl::InternalError(
        absl::StrCat("gpu backend: cuDNN has no forward algorithm", what));
  }
  plan->fwd_algo = fwd[best].algo;
  plan->fwd_math = fwd[best].mathType;

  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  if (!ok(cudnnGetConvolutionBackwardDataAlgorithm_v7(
              cudnn, plan->w, plan->y, plan->conv, plan->x,
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, data),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7")) {
    return error;
  }
  best = ChooseAlgo(data, returned);
  if (best < 0) {
    return absl::InternalError(absl::StrCat(
        "gpu backend: cuDNN has no backward-data algorithm", what));
  }
  plan->data_algo = data[best].algo;
  plan->data_math = data[best].mathType;

  cudnnConvolutionBwdFilterAlgoPerf_t
      filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  if (!ok(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              cudnn, plan->x, plan->y, plan->conv, plan->w,
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, filter),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7")) {
    return error;
  }
  best = ChooseAlgo(filter, returned);
  if (best < 0) {
    return absl::InternalError(absl::StrCat(
        "gpu backend: cuDNN has no backward-filter algorithm", what));
  }
  plan->filter_algo = filter[best].algo;
  plan->filter_math = filter[best].mathType;

  // The exact workspace sizes for the chosen algorithms and math types.
  if (!ok(cudnnSetConvolutionMathType(plan->conv, plan->fwd_math),
          "cudnnSetConvolutionMathType") ||
      !ok(cudnnGetConvolutionForwardWorkspaceSize(
              cudnn, plan->x, plan->w, plan->conv, plan->y, plan->fwd_algo,
              &plan->fwd_bytes),
          "cudnnGetConvolutionForwardWorkspaceSize") ||
      !ok(cudnnSetConvolutionMathType(plan->conv, plan->data_math),
          "cudnnSetConvolutionMathType") ||
      !ok(cudnnGetConvolutionBackwardDataWorkspaceSize(
              cudnn, plan->w, plan->y, plan->conv, plan->x, plan->data_algo,
              &plan->data_bytes),
          "cudnnGetConvolutionBackwardDataWorkspaceSize") ||
      !ok(cudnnSetConvolutionMathType(plan->conv, plan->filter_math),
          "cudnnSetConvolutionMathType") ||
      !ok(cudnnGetConvolutionBackwardFilterWorkspaceSize(
              cudnn, plan->x, plan->y, plan->conv, plan->w, plan->filter_algo,
              &plan->filter_bytes),
          "cudnnGetConvolutionBackwardFilterWorkspaceSize")) {
    return error;
  }
  return plan;
}

}  // namespace train
}  // namespace starling
