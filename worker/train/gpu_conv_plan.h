// ConvPlan: what the GPU backend keeps per Conv2dShape: cuDNN's tensor,
// filter and convolution descriptors, and for each direction (forward,
// backward data, backward filter) the algorithm, math type and workspace
// size. Algorithms come from cuDNN's heuristics
// (cudnnGetConvolution*Algorithm_v7): the highest-ranked one that succeeds,
// needs at most kMaxConvWorkspaceBytes and uses CUDNN_FMA_MATH (exact FP32,
// no TF32), preferring a deterministic one; else the highest-ranked that
// succeeds. Only built with --config=cuda.
#ifndef STARLING_WORKER_TRAIN_GPU_CONV_PLAN_H_
#define STARLING_WORKER_TRAIN_GPU_CONV_PLAN_H_

#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/train/backend.h"

namespace starling {
namespace train {

inline constexpr size_t kMaxConvWorkspaceBytes = size_t{1} << 30;

struct ConvPlan {
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan();

  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // Set the direction's math type on it before each call.
  cudnnConvolutionDescriptor_t conv = nullptr;

  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t fwd_math = CUDNN_FMA_MATH;
  size_t fwd_bytes = 0;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  cudnnMathType_t data_math = CUDNN_FMA_MATH;
  size_t data_bytes = 0;
  cudnnConvolutionBwdFilterAlgo_t filter_algo =
      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  cudnnMathType_t filter_math = CUDNN_FMA_MATH;
  size_t filter_bytes = 0;
};

// Builds the plan for `shape` (host-side cuDNN calls only). Internal naming
// the failing cuDNN call and the shape. REQUIRES: the shape is valid
// (ValidConv2dShape) with batch >= 1.
absl::StatusOr<std::unique_ptr<ConvPlan>> CreateConvPlan(
    cudnnHandle_t cudnn, const Conv2dShape& shape);

// Positive sizes (batch may be 0) and an output of at least 1x1.
bool ValidConv2dShape(const Conv2dShape& shape);
// "batch 2, in_channels 1, 28x28, out_channels 16, kernel 5, padding 2".
std::string Conv2dShapeString(const Conv2dShape& shape);

// Internal("gpu backend: <call> failed: <cuDNN's name> (<its last error
// message>)"); also used by gpu_backend.cc. REQUIRES: status is an error.
absl::Status CudnnError(cudnnStatus_t status, absl::string_view call);

}  // namespace train
}  // namespace starling

#endif  // STARLING_WORKER_TRAIN_GPU_CONV_PLAN_H_
