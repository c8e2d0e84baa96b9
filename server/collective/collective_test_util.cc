#include "server/collective/collective_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/collective/shard_layout.h"
#include "server/transport/loopback/loopback_transport.h"

namespace starling {
namespace collective {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element `i` of a buffer of T (memcpy: the buffer need not be aligned).
template <typename T>
T Load(const std::byte* base, size_t i) {
  T v;
  std::memcpy(&v, base + sizeof(T) * i, sizeof(T));
  return v;
}

template <typename T>
void Store(std::byte* base, size_t i, T v) {
  std::memcpy(base + sizeof(T) * i, &v, sizeof(T));
}

void SetElement(DataType type, std::byte* base, size_t i, double value) {
  switch (type) {
    case DataType::kFloat32:
      return Store<float>(base, i, static_cast<float>(value));
    case DataType::kFloat64:
      return Store<double>(base, i, value);
    case DataType::kFloat16:
      return Store<uint16_t>(base, i, FloatToHalf(static_cast<float>(value)));
    case DataType::kBFloat16:
      return Store<uint16_t>(base, i,
                             FloatToBFloat16(static_cast<float>(value)));
    case DataType::kInt32:
      return Store<int32_t>(base, i, static_cast<int32_t>(value));
    case DataType::kInt64:
      return Store<int64_t>(base, i, static_cast<int64_t>(value));
  }
}

double UnitRoundoff(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return std::ldexp(1.0, -24);
    case DataType::kFloat64:
      return std::ldexp(1.0, -53);
    case DataType::kFloat16:
      return std::ldexp(1.0, -11);
    case DataType::kBFloat16:
      return std::ldexp(1.0, -8);
    default:
      return 0;
  }
}

}  // namespace

std::string GridCase::ToString() const {
  return absl::StrCat("N=", size, " count=", count, " ", DataTypeName(type),
                      " ", ReduceOpName(op), " chunk_bytes=", chunk_bytes);
}

std::vector<GridCase> SmallGrid(bool all_types) {
  const std::vector<DataType> types =
      all_types ? std::vector<DataType>{DataType::kFloat32, DataType::kFloat64,
                                        DataType::kFloat16, DataType::kBFloat16,
                                        DataType::kInt32,   DataType::kInt64}
                : std::vector<DataType>{DataType::kFloat32};
  const std::vector<ReduceOp> ops =
      all_types ? std::vector<ReduceOp>{ReduceOp::kSum, ReduceOp::kMin,
                                        ReduceOp::kMax, ReduceOp::kAverage}
                : std::vector<ReduceOp>{ReduceOp::kSum};
  std::vector<GridCase> grid;
  for (int size : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16}) {
    std::vector<size_t> counts = {0, 1,  static_cast<size_t>(size - 1),    2,
                                  7, 97, static_cast<size_t>(4 * size + 3)};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (size_t count : counts) {
      for (DataType type : types) {
        for (ReduceOp op : ops) {
          // 24 bytes: several chunks per step, and chunks that are not a
          // power of two elements.
          grid.push_back(GridCase{size, count, type, op, 24});
        }
      }
    }
  }
  return grid;
}

std::vector<absl::Status> RunRanks(
    const std::vector<transport::Transport*>& transports,
    const CommunicatorOptions& options, const RankBody& body) {
  const int size = static_cast<int>(transports.size());
  std::vector<absl::Status> statuses(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(transports[rank], options);
      statuses[rank] = comm.ok() ? body(rank, comm->get()) : comm.status();
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

std::vector<absl::Status> RunOnLoopback(int size,
                                        const CommunicatorOptions& options,
                                        const RankBody& body) {
  transport::loopback::LoopbackFabric fabric(size);
  std::vector<transport::Transport*> transports;
  for (int rank = 0; rank < size; ++rank) {
    transports.push_back(fabric.endpoint(rank));
  }
  return RunRanks(transports, options, body);
}

absl::Status FirstError(const std::vector<absl::Status>& statuses) {
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    if (!statuses[rank].ok()) {
      return absl::Status(
          statuses[rank].code(),
          absl::StrCat("rank ", rank, ": ", statuses[rank].message()));
    }
  }
  return absl::OkStatus();
}

std::vector<std::byte> MakeInput(DataType type, size_t count, int rank,
                                 uint64_t seed) {
  std::vector<std::byte> out(count * DataTypeBytes(type));
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = SplitMix(seed ^ SplitMix(rank * 0x100000001ull + i));
    double value;
    if (IsFloatingPoint(type)) {
      value = static_cast<double>(bits >> 11) * std::ldexp(1.0, -52) - 1.0;
    } else {
      value = static_cast<double>(static_cast<int64_t>(bits % 2001) - 1000);
    }
    SetElement(type, out.data(), i, value);
  }
  return out;
}

double ElementAt(DataType type, const std::vector<std::byte>& buffer,
                 size_t i) {
  const std::byte* base = buffer.data();
  switch (type) {
    case DataType::kFloat32:
      return Load<float>(base, i);
    case DataType::kFloat64:
      return Load<double>(base, i);
    case DataType::kFloat16:
      return HalfToFloat(Load<uint16_t>(base, i));
    case DataType::kBFloat16:
      return BFloat16ToFloat(Load<uint16_t>(base, i));
    case DataType::kInt32:
      return Load<int32_t>(base, i);
    case DataType::kInt64:
      return static_cast<double>(Load<int64_t>(base, i));
  }
  return 0;
}

absl::Status CheckCollective(
    OpKind kind, Algorithm algorithm, const GridCase& c,
    const std::vector<transport::Transport*>& transports) {
  const int n = c.size;
  const uint64_t seed = SplitMix(c.count * 131 + n);
  std::vector<std::vector<std::byte>> inputs(n);
  for (int r = 0; r < n; ++r) inputs[r] = MakeInput(c.type, c.count, r, seed);
  const ShardLayout layout(c.count, n);
  const int root = n - 1;

  // fp64 reference and per-element tolerance.
  std::vector<double> expected(c.count), tolerance(c.count, 0.0);
  const double u = UnitRoundoff(c.type);
  for (size_t i = 0; i < c.count; ++i) {
    if (kind == OpKind::kAllGather) {
      expected[i] = ElementAt(c.type, inputs[layout.BlockOf(i)], i);
      continue;
    }
    if (kind == OpKind::kBroadcast) {
      expected[i] = ElementAt(c.type, inputs[root], i);
      continue;
    }
    double sum = 0, abs_sum = 0, product = 1;
    // Integer products wrap modulo 2^bits: kept in uint64 and narrowed.
    uint64_t int_product = 1;
    double lo = ElementAt(c.type, inputs[0], i), hi = lo;
    for (int r = 0; r < n; ++r) {
      const double x = ElementAt(c.type, inputs[r], i);
      product *= x;
      int_product *= static_cast<uint64_t>(static_cast<int64_t>(x));
      sum += x;
      abs_sum += std::fabs(x);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    double bound = n * u * abs_sum;
    if (c.type == DataType::kFloat16) bound += n * std::ldexp(1.0, -24);
    switch (c.op) {
      case ReduceOp::kSum:
        expected[i] = sum;
        tolerance[i] = bound;
        break;
      case ReduceOp::kMin:
        expected[i] = lo;
        break;
      case ReduceOp::kMax:
        expected[i] = hi;
        break;
      case ReduceOp::kAverage:
        if (IsFloatingPoint(c.type)) {
          expected[i] = sum / n;
          tolerance[i] = bound / n + 2 * u * std::fabs(expected[i]);
        } else {
          expected[i] = static_cast<double>(static_cast<int64_t>(sum) / n);
        }
        break;
      case ReduceOp::kProduct:
        if (IsFloatingPoint(c.type)) {
          expected[i] = product;
          tolerance[i] = 2 * n * u * std::fabs(product);
        } else if (c.type == DataType::kInt32) {
          expected[i] =
              static_cast<int32_t>(static_cast<uint32_t>(int_product));
        } else {
          expected[i] = static_cast<double>(static_cast<int64_t>(int_product));
        }
        break;
    }
  }

  CommunicatorOptions options;
  options.chunk_bytes = c.chunk_bytes;
  options.selector.doubling_max_bytes = c.doubling_max_bytes;
  options.timeout = absl::Seconds(20);
  RankBody body = [&](int rank, Communicator* comm) -> absl::Status {
    std::vector<std::byte> data = inputs[rank];
    CallOptions call;
    call.algorithm = algorithm;
    absl::Status s;
    switch (kind) {
      case OpKind::kAllReduce:
        s = comm->AllReduce(absl::MakeSpan(data), c.type, c.op, call);
        break;
      case OpKind::kReduceScatter:
        s = comm->ReduceScatter(absl::MakeSpan(data), c.type, c.op, call);
        break;
      case OpKind::kAllGather:
        s = comm->AllGather(absl::MakeSpan(data), c.type, call);
        break;
      case OpKind::kBroadcast:
        s = comm->Broadcast(absl::MakeSpan(data), c.type, root, call);
        break;
      case OpKind::kBarrier:
        s = comm->Barrier(call);
        break;
      case OpKind::kShift:
        s = comm->Shift(absl::MakeSpan(data), c.type, root, call);
        break;
    }
    if (!s.ok()) return s;
    size_t begin = 0, end = c.count;
    if (kind == OpKind::kReduceScatter) {
      begin = layout.Begin(rank);
      end = layout.End(rank);
    }
    for (size_t i = begin; i < end; ++i) {
      const double got = ElementAt(c.type, data, i);
      if (!(std::fabs(got - expected[i]) <= tolerance[i])) {
        return absl::InternalError(
            absl::StrCat(OpKindName(kind), " (", AlgorithmName(algorithm), ") ",
                         c.ToString(), ": element ", i, " is ", got,
                         ", expected ", expected[i], " +- ", tolerance[i]));
      }
    }
    return absl::OkStatus();
  };
  if (!transports.empty()) {
    return FirstError(RunRanks(transports, options, body));
  }
  return FirstError(RunOnLoopback(n, options, body));
}

absl::Status CheckGridOnTransports(
    const std::vector<transport::Transport*>& transports) {
  const int size = static_cast<int>(transports.size());
  const std::vector<size_t> counts = {0, 1, static_cast<size_t>(size - 1), 97,
                                      100003};
  for (Algorithm algorithm :
       {Algorithm::kButterfly, Algorithm::kRing, Algorithm::kTree,
        Algorithm::kReduceBroadcast, Algorithm::kAuto}) {
    for (size_t count : counts) {
      for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduceScatter,
                          OpKind::kAllGather, OpKind::kBroadcast}) {
        GridCase c{size, count, DataType::kFloat32, ReduceOp::kSum, 4096};
        absl::Status status = CheckCollective(kind, algorithm, c, transports);
        if (!status.ok()) {
          return absl::Status(
              status.code(),
              absl::StrCat(OpKindName(kind), " ", AlgorithmName(algorithm), " ",
                           c.ToString(), ": ", status.message()));
        }
      }
    }
  }
  for (DataType type :
       {DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
        DataType::kInt32, DataType::kInt64}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAverage}) {
      GridCase c{size, 1009, type, op, 512};
      absl::Status status = CheckCollective(
          OpKind::kAllReduce, Algorithm::kButterfly, c, transports);
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat(c.ToString(), ": ", status.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace starling
