#include "client/python/tensor_staging.h"

#include <cstring>
#include <stdexcept>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace torch_backend {
const char* ReduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

namespace {

// The pool's element type for `wire`.
StarlingDataType TypeOf(at::ScalarType wire) {
  switch (wire) {
    case at::kDouble:
      return STARLING_FLOAT64;
    case at::kHalf:
      return STARLING_FLOAT16;
    case at::kBFloat16:
      return STARLING_BFLOAT16;
    case at::kInt:
      return STARLING_INT32;
    case at::kLong:
      return STARLING_INT64;
    default:
      return STARLING_FLOAT32;
  }
}

// The wire shape of `tensor`: its own, with a trailing 2 when complex.
at::Tensor AsReal(const at::Tensor& tensor, const ReductionPlan& plan) {
  return plan.complex ? at::view_as_real(tensor.resolve_conj()) : tensor;
}

}  // namespace

absl::StatusOr<ReductionPlan> PlanReduction(const std::string& op_name,
                                            at::ScalarType dtype,
                                            c10d::ReduceOp op) {
  const c10d::ReduceOp::RedOpType kind = op.op_;
  ReductionPlan plan;
  switch (kind) {
    case c10d::ReduceOp::SUM:
      plan.op = STARLING_SUM;
      break;
    case c10d::ReduceOp::AVG:
      plan.op = STARLING_AVERAGE;
      break;
    case c10d::ReduceOp::PRODUCT:
      plan.op = STARLING_PRODUCT;
      break;
    case c10d::ReduceOp::MIN:
      plan.op = STARLING_MIN;
      break;
    case c10d::ReduceOp::MAX:
      plan.op = STARLING_MAX;
      break;
    case c10d::ReduceOp::PREMUL_SUM:
      return absl::InvalidArgumentError(absl::StrCat(
          op_name,
          ": ReduceOp.PREMUL_SUM is not supported by the starling backend; "
          "multiply the tensor by the factor and use ReduceOp.SUM"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          op_name, ": ReduceOp.", ReduceOpName(kind),
          " is not supported by the starling backend (it reduces with SUM, "
          "AVG, PRODUCT, MIN and MAX); for bool tensors MIN is a logical and "
          "and MAX a logical or; for bitwise operators use a gloo group: "
          "torch.distributed.new_group(backend=\"gloo\")"));
  }
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kInt:
    case at::kLong:
      plan.wire = dtype;
      break;
    case at::kBool:
      if (kind == c10d::ReduceOp::AVG) {
        return absl::InvalidArgumentError(absl::StrCat(
            op_name,
            ": ReduceOp.AVG of a bool tensor is not defined; use MIN (logical "
            "and), MAX or SUM (logical or)"));
      }
      plan.wire = at::kInt;
      break;
    case at::kByte:
    case at::kChar:
    case at::kShort:
      plan.wire = at::kInt;
      break;
    case at::kComplexFloat:
    case at::kComplexDouble:
    case at::kComplexHalf:
      if (kind != c10d::ReduceOp::SUM && kind != c10d::ReduceOp::AVG) {
        return absl::InvalidArgumentError(absl::StrCat(
            op_name, ": ReduceOp.", ReduceOpName(kind),
            " of a complex tensor (", DtypeName(dtype),
            ") is not defined; complex tensors reduce with SUM and AVG"));
      }
      plan.complex = true;
      plan.wire = dtype == at::kComplexDouble ? at::kDouble
                  : dtype == at::kComplexHalf ? at::kHalf
                                              : at::kFloat;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          op_name, ": tensors of ", DtypeName(dtype),
          " cannot be reduced by the starling backend (it reduces floating "
          "point, integer, bool and complex tensors)"));
  }
  plan.type = TypeOf(plan.wire);
  return plan;
}

size_t ReductionBytes(const at::Tensor& tensor, const ReductionPlan& plan) {
  return static_cast<size_t>(tensor.numel()) * (plan.complex ? 2 : 1) *
         at::elementSize(plan.wire);
}

void PackReduction(const at::Tensor& tensor, const ReductionPlan& plan,
                   std::byte* to) {
  if (tensor.numel() == 0) return;
  const at::Tensor source = AsReal(tensor, plan);
  if (source.scalar_type() == plan.wire && IsHostDense(source)) {
    std::memcpy(to, source.data_ptr(), source.nbytes());
    return;
  }
  at::from_blob(to, source.sizes(), at::TensorOptions().dtype(plan.wire))
      .copy_(source);
}

void UnpackReduction(const std::byte* from, const ReductionPlan& plan,
                     const at::Tensor& tensor) {
  if (tensor.numel() == 0) return;
  if (!plan.complex && tensor.scalar_type() == plan.wire &&
      IsHostDense(tensor)) {
    std::memcpy(tensor.data_ptr(), from, tensor.nbytes());
    return;
  }
  std::vector<int64_t> sizes = tensor.sizes().vec();
  if (plan.complex) sizes.push_back(2);
  at::Tensor result = at::from_blob(const_cast<std::byte*>(from), sizes,
                                    at::TensorOptions().dtype(plan.wire));
  if (plan.complex) result = at::view_as_complex(result);
  tensor.copy_(result);
}

size_t PaddedBytes(size_t bytes) { return (bytes + 3) / 4 * 4; }

bool IsHostDense(const at::Tensor& tensor) {
  return tensor.is_cpu() && tensor.layout() == at::kStrided &&
         tensor.is_contiguous() && !tensor.is_conj() && !tensor.is_neg();
}

Staged StageIn(const at::Tensor& tensor) {
  if (IsHostDense(tensor)) return {tensor, tensor};
  // A copy: the tensor is not dense on the host, so none of these returns
  // the tensor itself.
  return {tensor,
          tensor.to(at::kCPU).resolve_conj().resolve_neg().contiguous()};
}

Staged StageOut(const at::Tensor& tensor) {
  if (IsHostDense(tensor)) return {tensor, tensor};
  return {tensor, at::empty(tensor.sizes(), tensor.options().device(at::kCPU))};
}

void WriteBack(const Staged& staged) {
  if (!staged.host.is_same(staged.user)) staged.user.copy_(staged.host);
}

std::byte* BytesOf(const at::Tensor& host) {
  return static_cast<std::byte*>(host.data_ptr());
}

void PackBytes(const at::Tensor& tensor, std::byte* to) {
  if (tensor.nbytes() > 0) std::memcpy(to, tensor.data_ptr(), tensor.nbytes());
}

void UnpackBytes(const std::byte* from, const at::Tensor& tensor) {
  if (tensor.nbytes() > 0)
    std::memcpy(tensor.data_ptr(), from, tensor.nbytes());
}

void ThrowError(const std::string& message) {
  throw std::runtime_error("starling " + message);
}

void CheckDense(const std::string& op, const at::Tensor& tensor) {
  if (!tensor.defined()) ThrowError(op + ": got an undefined tensor");
  if (tensor.layout() != at::kStrided) {
    ThrowError(op + ": takes dense (strided) tensors, not sparse ones");
  }
}

const at::Tensor& OnlyTensor(const std::string& op,
                             const std::vector<at::Tensor>& tensors) {
  if (tensors.size() != 1) {
    ThrowError(absl::StrCat(op, ": takes one tensor per process, not ",
                            tensors.size()));
  }
  CheckDense(op, tensors[0]);
  return tensors[0];
}

ReductionPlan PlanOrThrow(const std::string& op, at::ScalarType dtype,
                          const c10d::ReduceOp& reduce_op) {
  absl::StatusOr<ReductionPlan> plan = PlanReduction(op, dtype, reduce_op);
  if (!plan.ok()) ThrowError(std::string(plan.status().message()));
  return *plan;
}

std::string DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "torch.float32";
    case at::kDouble:
      return "torch.float64";
    case at::kHalf:
      return "torch.float16";
    case at::kBFloat16:
      return "torch.bfloat16";
    case at::kInt:
      return "torch.int32";
    case at::kLong:
      return "torch.int64";
    case at::kShort:
      return "torch.int16";
    case at::kChar:
      return "torch.int8";
    case at::kByte:
      return "torch.uint8";
    case at::kBool:
      return "torch.bool";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kComplexHalf:
      return "torch.complex32";
    default:
      return absl::StrCat("torch.", c10::toString(dtype));
  }
}

std::string Describe(const at::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "] ",
                      DtypeName(tensor.scalar_type()));
}

}  // namespace torch_backend
}  // namespace starling
