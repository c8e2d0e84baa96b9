#include "server/collective/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace starling {
namespace collective {
namespace {

// The kernels: one loop per (type, op), with restrict pointers so the
// compiler needs no alias checks and emits packed instructions.
template <typename T>
void SumLoop(T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

template <typename T>
void MinLoop(T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = b[i] < a[i] ? b[i] : a[i];
}

template <typename T>
void MaxLoop(T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] < b[i] ? b[i] : a[i];
}

template <typename T>
void ProductLoop(T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] *= b[i];
}

template <typename T>
void DivideLoop(T* __restrict a, size_t n, T divisor) {
  for (size_t i = 0; i < n; ++i) a[i] /= divisor;
}

// 16-bit floats: widen, combine in fp32, narrow.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void Combine16(ReduceOp op, uint16_t* __restrict a,
               const uint16_t* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = Widen(a[i]);
    const float y = Widen(b[i]);
    float r;
    switch (op) {
      case ReduceOp::kMin:
        r = y < x ? y : x;
        break;
      case ReduceOp::kMax:
        r = x < y ? y : x;
        break;
      case ReduceOp::kProduct:
        r = x * y;
        break;
      default:
        r = x + y;
        break;
    }
    a[i] = Narrow(r);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void Divide16(uint16_t* a, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) a[i] = Narrow(Widen(a[i]) / divisor);
}

template <typename T>
void ApplyTyped(ReduceOp op, T* a, const T* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      SumLoop(a, b, n);
      return;
    case ReduceOp::kMin:
      MinLoop(a, b, n);
      return;
    case ReduceOp::kMax:
      MaxLoop(a, b, n);
      return;
    case ReduceOp::kProduct:
      ProductLoop(a, b, n);
      return;
  }
}

// Integer sums and products run on the unsigned type so that overflow
// wraps (defined) instead of being undefined behaviour.
template <typename S, typename U>
void ApplyInt(ReduceOp op, void* a, const void* b, size_t n) {
  if (op == ReduceOp::kProduct) {
    ProductLoop(static_cast<U*>(a), static_cast<const U*>(b), n);
  } else if (op == ReduceOp::kSum || op == ReduceOp::kAverage) {
    SumLoop(static_cast<U*>(a), static_cast<const U*>(b), n);
  } else {
    ApplyTyped(op, static_cast<S*>(a), static_cast<const S*>(b), n);
  }
}

// REQUIRES: a and b aligned for the element type.
void ApplyAligned(DataType type, ReduceOp op, void* a, const void* b,
                  size_t n) {
  switch (type) {
    case DataType::kFloat32:
      ApplyTyped(op, static_cast<float*>(a), static_cast<const float*>(b), n);
      return;
    case DataType::kFloat64:
      ApplyTyped(op, static_cast<double*>(a), static_cast<const double*>(b), n);
      return;
    case DataType::kInt32:
      ApplyInt<int32_t, uint32_t>(op, a, b, n);
      return;
    case DataType::kInt64:
      ApplyInt<int64_t, uint64_t>(op, a, b, n);
      return;
    case DataType::kFloat16:
      Combine16<HalfToFloat, FloatToHalf>(op, static_cast<uint16_t*>(a),
                                          static_cast<const uint16_t*>(b), n);
      return;
    case DataType::kBFloat16:
      Combine16<BFloat16ToFloat, FloatToBFloat16>(
          op, static_cast<uint16_t*>(a), static_cast<const uint16_t*>(b), n);
      return;
  }
}

void DivideAligned(DataType type, void* a, size_t n, int group_size) {
  switch (type) {
    case DataType::kFloat32:
      DivideLoop(static_cast<float*>(a), n, static_cast<float>(group_size));
      return;
    case DataType::kFloat64:
      DivideLoop(static_cast<double*>(a), n, static_cast<double>(group_size));
      return;
    case DataType::kInt32:
      DivideLoop(static_cast<int32_t*>(a), n, static_cast<int32_t>(group_size));
      return;
    case DataType::kInt64:
      DivideLoop(static_cast<int64_t*>(a), n, static_cast<int64_t>(group_size));
      return;
    case DataType::kFloat16:
      Divide16<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(a), n,
                                         static_cast<float>(group_size));
      return;
    case DataType::kBFloat16:
      Divide16<BFloat16ToFloat, FloatToBFloat16>(
          static_cast<uint16_t*>(a), n, static_cast<float>(group_size));
      return;
  }
}

bool Aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Misaligned buffers are staged through aligned stack blocks.
constexpr size_t kStageBytes = 4096;

absl::Status CheckLength(DataType type, size_t bytes) {
  if (bytes % DataTypeBytes(type) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer of ", bytes, " bytes is not a whole number of ",
                     DataTypeName(type), " elements"));
  }
  return absl::OkStatus();
}

// ReduceMany's block: small enough that a block of `out` stays in the L1
// cache while every input is combined into it; a multiple of every element
// size and of kStageBytes.
constexpr size_t kManyBlockBytes = 8192;

// Reduce() after its checks: lengths equal, whole elements.
void ReduceChecked(DataType type, ReduceOp op, absl::Span<std::byte> inout,
                   absl::Span<const std::byte> in) {
  const size_t element_bytes = DataTypeBytes(type);
  if (Aligned(inout.data(), element_bytes) &&
      Aligned(in.data(), element_bytes)) {
    ApplyAligned(type, op, inout.data(), in.data(),
                 inout.size() / element_bytes);
    return;
  }
  alignas(16) std::byte a[kStageBytes];
  alignas(16) std::byte b[kStageBytes];
  for (size_t done = 0; done < inout.size(); done += kStageBytes) {
    const size_t bytes = std::min(kStageBytes, inout.size() - done);
    std::memcpy(a, inout.data() + done, bytes);
    std::memcpy(b, in.data() + done, bytes);
    ApplyAligned(type, op, a, b, bytes / element_bytes);
    std::memcpy(inout.data() + done, a, bytes);
  }
}

}  // namespace

absl::Status Reduce(DataType type, ReduceOp op, absl::Span<std::byte> inout,
                    absl::Span<const std::byte> in) {
  if (inout.size() != in.size()) {
    return absl::InvalidArgumentError(absl::StrCat("reduce of ", inout.size(),
                                                   " bytes with ", in.size(),
                                                   " bytes: lengths differ"));
  }
  if (absl::Status s = CheckLength(type, inout.size()); !s.ok()) return s;
  ReduceChecked(type, op, inout, in);
  return absl::OkStatus();
}

absl::Status ReduceMany(DataType type, ReduceOp op, absl::Span<std::byte> out,
                        absl::Span<const absl::Span<const std::byte>> in) {
  if (in.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce of no inputs into ", out.size(), " bytes"));
  }
  for (size_t j = 0; j < in.size(); ++j) {
    if (in[j].size() != out.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce into ", out.size(), " bytes: input ", j, " of ",
                       in.size(), " has ", in[j].size(), " bytes"));
    }
  }
  if (absl::Status s = CheckLength(type, out.size()); !s.ok()) return s;
  for (size_t done = 0; done < out.size(); done += kManyBlockBytes) {
    const size_t bytes = std::min(kManyBlockBytes, out.size() - done);
    absl::Span<std::byte> block = out.subspan(done, bytes);
    std::memcpy(block.data(), in[0].data() + done, bytes);
    for (size_t j = 1; j < in.size(); ++j) {
      ReduceChecked(type, op, block, in[j].subspan(done, bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status FinishAverage(DataType type, absl::Span<std::byte> data,
                           int group_size) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("average over a group of ", group_size, " ranks"));
  }
  if (absl::Status s = CheckLength(type, data.size()); !s.ok()) return s;
  const size_t element_bytes = DataTypeBytes(type);
  if (Aligned(data.data(), element_bytes)) {
    DivideAligned(type, data.data(), data.size() / element_bytes, group_size);
    return absl::OkStatus();
  }
  alignas(16) std::byte a[kStageBytes];
  for (size_t done = 0; done < data.size(); done += kStageBytes) {
    const size_t bytes = std::min(kStageBytes, data.size() - done);
    std::memcpy(a, data.data() + done, bytes);
    DivideAligned(type, a, bytes / element_bytes, group_size);
    std::memcpy(data.data() + done, a, bytes);
  }
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace starling
