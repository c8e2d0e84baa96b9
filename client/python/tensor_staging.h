// How the torch.distributed backend puts tensors into pool memory and takes
// results out: the element type a tensor travels as (its "wire type", one
// of collective_api.h's), and the copies both ways.
//
// - Reductions: float32, float64, float16, bfloat16, int32 and int64
//   travel as themselves. bool, uint8, int8 and int16 are widened to int32
//   and narrowed back as torch converts (modulo 2^bits, so sums and
//   products wrap as in torch; a bool is true when non-zero: SUM and MAX
//   are a logical or, MIN and PRODUCT a logical and). Complex tensors
//   travel as pairs of reals (SUM and AVG only).
// - Data movement (broadcast, gather, scatter, all-to-all): the tensor's
//   bytes, whatever its type, padded to a multiple of 4 bytes and moved
//   as int32.
//
// Pack and Unpack take dense host tensors: Staged makes them of any tensor.
// Functions are thread-compatible (tensors are not shared while copied).
#ifndef STARLING_CLIENT_PYTHON_TENSOR_STAGING_H_
#define STARLING_CLIENT_PYTHON_TENSOR_STAGING_H_

#include <ATen/ATen.h>

#include <cstddef>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "client/python/collective_api.h"

namespace starling {
namespace torch_backend {

// How one reduction's tensors travel.
struct ReductionPlan {
  at::ScalarType wire = at::kFloat;  // element type in the pool
  StarlingDataType type = STARLING_FLOAT32;
  StarlingReduceOp op = STARLING_SUM;
  bool complex = false;  // viewed as pairs of reals
};

// InvalidArgument naming `op_name`, the dtype and what to use instead for
// operators Starling does not reduce with (BAND, BOR, BXOR, PREMUL_SUM),
// for MIN/MAX/PRODUCT of complex tensors, AVG of bool tensors and dtypes
// with no arithmetic here (quantized ones).
absl::StatusOr<ReductionPlan> PlanReduction(const std::string& op_name,
                                            at::ScalarType dtype,
                                            c10d::ReduceOp op);

// Bytes `tensor` takes in the pool under `plan`.
size_t ReductionBytes(const at::Tensor& tensor, const ReductionPlan& plan);
// tensor -> pool at `to` (ReductionBytes long), converted to plan.wire.
void PackReduction(const at::Tensor& tensor, const ReductionPlan& plan,
                   std::byte* to);
// Pool at `from` -> tensor, converted back to its dtype.
void UnpackReduction(const std::byte* from, const ReductionPlan& plan,
                     const at::Tensor& tensor);

// `bytes` rounded up to a multiple of 4 (the int32 elements data moves as).
size_t PaddedBytes(size_t bytes);
// The tensor's bytes -> `to` (tensor.nbytes() long), and back. `tensor`
// must be a contiguous CPU tensor with no conjugate or negative bit
// (Host() makes one).
void PackBytes(const at::Tensor& tensor, std::byte* to);
void UnpackBytes(const std::byte* from, const at::Tensor& tensor);

// True when `tensor` can be packed and unpacked in place: a contiguous
// CPU tensor without a conjugate or negative bit.
bool IsHostDense(const at::Tensor& tensor);

// A tensor as the executor thread uses it: `host` is `user` itself when
// IsHostDense(user), otherwise a contiguous CPU tensor of the same shape
// and dtype that WriteBack() copies into `user` (CUDA tensors, views).
struct Staged {
  at::Tensor user;
  at::Tensor host;
};
// An input: the copy is made now, on the caller's thread (and its current
// CUDA stream), so that later work on the tensor cannot race with it.
Staged StageIn(const at::Tensor& tensor);
// An output: `host` starts empty.
Staged StageOut(const at::Tensor& tensor);
void WriteBack(const Staged& staged);
// The first byte of a dense host tensor.
std::byte* BytesOf(const at::Tensor& host);

// Argument errors at an op's call throw, PyTorch's convention (a
// RuntimeError in Python): std::runtime_error("starling " + message).
[[noreturn]] void ThrowError(const std::string& message);
// Throws unless `tensor` is defined and dense (strided), naming `op`.
void CheckDense(const std::string& op, const at::Tensor& tensor);
// The one tensor of `tensors` (dense), or throws naming `op`.
const at::Tensor& OnlyTensor(const std::string& op,
                             const std::vector<at::Tensor>& tensors);
// PlanReduction, throwing its error.
ReductionPlan PlanOrThrow(const std::string& op, at::ScalarType dtype,
                          const c10d::ReduceOp& reduce_op);

// The name torch gives `dtype` ("torch.float32").
std::string DtypeName(at::ScalarType dtype);
// "SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", ... (torch's names).
const char* ReduceOpName(c10d::ReduceOp::RedOpType op);
// "[2, 3] torch.float32"
std::string Describe(const at::Tensor& tensor);

}  // namespace torch_backend
}  // namespace starling

#endif  // STARLING_CLIENT_PYTHON_TENSOR_STAGING_H_
