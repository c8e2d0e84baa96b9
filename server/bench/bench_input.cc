#include "server/bench/bench_input.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "server/collective/shard_layout.h"

namespace starling {
namespace bench {
namespace {

using collective::DataType;
using collective::ReduceOp;

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

double Get(DataType t, const std::byte* base, size_t i) {
  switch (t) {
    case DataType::kFloat32:
      return Load<float>(base + 4 * i);
    case DataType::kFloat64:
      return Load<double>(base + 8 * i);
    case DataType::kFloat16:
      return collective::HalfToFloat(Load<uint16_t>(base + 2 * i));
    case DataType::kBFloat16:
      return collective::BFloat16ToFloat(Load<uint16_t>(base + 2 * i));
    case DataType::kInt32:
      return Load<int32_t>(base + 4 * i);
    case DataType::kInt64:
      return static_cast<double>(Load<int64_t>(base + 8 * i));
  }
  return 0;
}

// `v` is a small integer, exact in every type.
void Set(DataType t, std::byte* base, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      return Store<float>(base + 4 * i, static_cast<float>(v));
    case DataType::kFloat64:
      return Store<double>(base + 8 * i, v);
    case DataType::kFloat16:
      return Store<uint16_t>(base + 2 * i,
                             collective::FloatToHalf(static_cast<float>(v)));
    case DataType::kBFloat16:
      return Store<uint16_t>(
          base + 2 * i, collective::FloatToBFloat16(static_cast<float>(v)));
    case DataType::kInt32:
      return Store<int32_t>(base + 4 * i, static_cast<int32_t>(v));
    case DataType::kInt64:
      return Store<int64_t>(base + 8 * i, static_cast<int64_t>(v));
  }
}

double K(size_t i) { return 1.0 + static_cast<double>(i % 13); }

double ReducedValue(DataType t, ReduceOp reduce, int ranks, size_t i) {
  const double n = ranks;
  const double sum = n * (n + 1) / 2 * K(i);
  switch (reduce) {
    case ReduceOp::kSum:
      return sum;
    case ReduceOp::kMin:
      return K(i);
    case ReduceOp::kMax:
      return n * K(i);
    case ReduceOp::kAverage:
      return collective::IsFloatingPoint(t) ? sum / n : std::trunc(sum / n);
    case ReduceOp::kProduct:
      // Rank r contributes (r + 1) K(i): n! K(i)^n.
      return std::tgamma(n + 1) * std::pow(K(i), n);
  }
  return 0;
}

double RelativeTolerance(DataType t, int ranks) {
  const double steps = std::ceil(std::log2(std::max(ranks, 1))) + 1;
  switch (t) {
    case DataType::kFloat16:
      return steps * std::ldexp(1.0, -11);
    case DataType::kBFloat16:
      return steps * std::ldexp(1.0, -8);
    default:
      return 0;
  }
}

}  // namespace

void FillInput(Op op, DataType dtype, absl::Span<std::byte> data, int rank,
               int ranks, int root) {
  const size_t n = data.size() / collective::DataTypeBytes(dtype);
  std::byte* base = data.data();
  if (op == Op::kBroadcast && rank != root) {
    std::memset(base, 0, data.size());
    return;
  }
  size_t begin = 0, end = n;
  if (op == Op::kAllGather) {
    const collective::ShardLayout layout(n, ranks);
    std::memset(base, 0, data.size());
    begin = layout.Begin(rank);
    end = layout.End(rank);
  }
  for (size_t i = begin; i < end; ++i) Set(dtype, base, i, (rank + 1) * K(i));
}

CheckOutcome CheckOutput(Op op, DataType dtype, ReduceOp reduce,
                         absl::Span<const std::byte> data, int rank, int ranks,
                         int root) {
  const size_t n = data.size() / collective::DataTypeBytes(dtype);
  const collective::ShardLayout layout(n, ranks);
  size_t begin = 0, end = n;
  if (op == Op::kReduceScatter) {
    begin = layout.Begin(rank);
    end = layout.End(rank);
  }
  const double tolerance = RelativeTolerance(dtype, ranks);
  CheckOutcome outcome;
  for (size_t i = begin; i < end; ++i) {
    double want = 0;
    switch (op) {
      case Op::kAllReduce:
      case Op::kReduceScatter:
        want = ReducedValue(dtype, reduce, ranks, i);
        break;
      case Op::kAllGather:
        want = (layout.BlockOf(i) + 1) * K(i);
        break;
      case Op::kBroadcast:
        want = (root + 1) * K(i);
        break;
    }
    const double got = Get(dtype, data.data(), i);
    if (std::fabs(got - want) <= tolerance * std::fabs(want)) continue;
    if (outcome.wrong++ == 0) {
      outcome.first_wrong =
          absl::StrFormat("element %d: got %.17g, want %.17g", i, got, want);
    }
  }
  return outcome;
}

}  // namespace bench
}  // namespace starling
