// The client's typed collectives (Client::AllReduceAsync on bytes,
// BroadcastAsync, AllGatherAsync, ReduceScatterAsync) against real daemons
// on loopback, one std::thread per worker, for several group shapes:
//   - every element type with every reduce op (sum, min, max, average,
//     product), odd lengths and length 0, exact against an fp64 reference
//     (the inputs are chosen so that every result is exact in its type);
//   - broadcast from the first and the last slot moves the root's bytes,
//     all-gather puts every worker's block at its slot, reduce-scatter
//     reduces each worker's own block and leaves the others as they were;
//   - mistakes fail on every worker with a message naming them: lengths
//     that differ across daemons, a root that is no worker's, blocks that
//     do not divide.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using client::DataType;
using client::ReduceOp;
using ::testing::HasSubstr;

#define COLLECTIVES_RETURN_IF_ERROR(expr) \
  do {                                    \
    const absl::Status status_ = (expr);  \
    if (!status_.ok()) return status_;    \
  } while (false)

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64,
                               DataType::kFloat16, DataType::kBFloat16,
                               DataType::kInt32,   DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAverage, ReduceOp::kProduct};

size_t Bytes(DataType type) {
  switch (type) {
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    default:
      return 4;
  }
}

bool IsFloat(DataType type) {
  return type != DataType::kInt32 && type != DataType::kInt64;
}

// Element i of `data` as a double (exact for the values used here).
double Load(DataType type, const std::byte* data, size_t i) {
  switch (type) {
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, data + 8 * i, 8);
      return v;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      float v;
      if (type == DataType::kFloat16) {
        client::FromFloat16(absl::MakeConstSpan(&h, 1), absl::MakeSpan(&v, 1));
      } else {
        client::FromBFloat16(absl::MakeConstSpan(&h, 1), absl::MakeSpan(&v, 1));
      }
      return v;
    }
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

void Store(DataType type, double value, std::byte* data, size_t i) {
  switch (type) {
    case DataType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(data + 4 * i, &v, 4);
      return;
    }
    case DataType::kFloat64:
      std::memcpy(data + 8 * i, &value, 8);
      return;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const float v = static_cast<float>(value);
      uint16_t h;
      if (type == DataType::kFloat16) {
        client::ToFloat16(absl::MakeConstSpan(&v, 1), absl::MakeSpan(&h, 1));
      } else {
        client::ToBFloat16(absl::MakeConstSpan(&v, 1), absl::MakeSpan(&h, 1));
      }
      std::memcpy(data + 2 * i, &h, 2);
      return;
    }
    case DataType::kInt32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(data + 4 * i, &v, 4);
      return;
    }
    case DataType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(data + 8 * i, &v, 8);
      return;
    }
  }
}

// Worker `slot`'s element i for `op` among `workers`: small integers (or
// halves) whose sums, products and averages are exact in every type; the
// average's inputs are centred so that the sum divides by `workers`.
double Input(DataType type, ReduceOp op, int slot, size_t i, int workers) {
  const int k = static_cast<int>((i * 7 + slot * 3) % 11) - 5;
  switch (op) {
    case ReduceOp::kProduct: {
      const int r = static_cast<int>((i + slot) % 3);
      return r == 0 ? 2 : (r == 1 ? -1 : 1);
    }
    case ReduceOp::kAverage:
      if (IsFloat(type)) {
        return static_cast<double>(i % 9) - 4 + slot - (workers - 1) / 2.0;
      }
      return k;
    default:
      // int64 values beyond 32 bits, to see the whole width move.
      return type == DataType::kInt64 ? k * 4294967296.0 : k;
  }
}

double Reference(DataType type, ReduceOp op, size_t i, int workers) {
  double acc = Input(type, op, 0, i, workers);
  for (int s = 1; s < workers; ++s) {
    const double x = Input(type, op, s, i, workers);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        acc += x;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, x);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, x);
        break;
      case ReduceOp::kProduct:
        acc *= x;
        break;
    }
  }
  if (op != ReduceOp::kAverage) return acc;
  if (IsFloat(type)) return acc / workers;
  return static_cast<double>(static_cast<int64_t>(acc) / workers);
}

absl::Status Compare(const std::string& what, DataType type,
                     const std::byte* got, size_t i, double want) {
  const double value = Load(type, got, i);
  if (value != want) {
    return absl::InternalError(
        absl::StrCat(what, ": element ", i, " = ", value, ", want ", want));
  }
  return absl::OkStatus();
}

ClusterOptions Shape(int daemons, int local_workers) {
  ClusterOptions options;
  options.daemons = daemons;
  options.local_workers = local_workers;
  options.fix_parameter_count = false;
  return options;
}

absl::StatusOr<std::unique_ptr<client::Client>> ConnectWorker(
    const NodeCluster& cluster, int daemon, int index) {
  client::ClientOptions options;
  options.socket_path = cluster.socket_path(daemon);
  options.worker_index = index;
  options.worker_name = absl::StrCat("worker ", daemon, ".", index);
  options.timeout = absl::Seconds(30);
  options.pool_bytes = size_t{4} << 20;
  return client::Client::Connect(options);
}

// Runs `body(client)` in one thread per worker of `cluster`; their
// statuses, slot by slot.
std::vector<absl::Status> RunWorkers(
    const NodeCluster& cluster, const ClusterOptions& options,
    const std::function<absl::Status(client::Client&)>& body) {
  std::vector<absl::Status> results(options.daemons * options.local_workers);
  std::vector<std::thread> threads;
  for (int d = 0; d < options.daemons; ++d) {
    for (int i = 0; i < options.local_workers; ++i) {
      threads.emplace_back([&, d, i] {
        absl::StatusOr<std::unique_ptr<client::Client>> c =
            ConnectWorker(cluster, d, i);
        absl::Status& result = results[d * options.local_workers + i];
        if (!c.ok()) {
          result = c.status();
          return;
        }
        // A barrier begins the run: slot() and total_workers() are known.
        result = (*c)->Barrier();
        if (result.ok()) result = body(**c);
        if (result.ok()) result = (*c)->Finish();
      });
    }
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// Every reduce op of every type, odd lengths and 0; broadcast, all-gather
// and reduce-scatter of every type.
absl::Status EveryCollective(client::Client& c) {
  const int workers = c.total_workers();
  const int slot = c.slot();
  if (workers != c.group_size() * c.local_workers()) {
    return absl::InternalError(absl::StrCat("total workers ", workers));
  }
  // The local workers' buffers lie at different offsets in their pools:
  // the daemon must take each worker's own.
  if (c.worker_index() % 2 == 1) {
    absl::StatusOr<absl::Span<float>> padding = c.Allocate(1000 + c.slot());
    if (!padding.ok()) return padding.status();
  }
  absl::StatusOr<absl::Span<float>> pool = c.Allocate(64 << 10);
  if (!pool.ok()) return pool.status();
  std::byte* buffer = reinterpret_cast<std::byte*>(pool->data());
  for (DataType type : kTypes) {
    const std::string name(client::DataTypeName(type));
    // Buffers the daemon copies through its own, and scratch buffers it
    // runs the collective in when it has one worker.
    for (bool scratch : {false, true}) {
      const client::CollectiveOptions options{scratch};
      const char* how = scratch ? " (scratch)" : "";
      for (ReduceOp op : kOps) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{13}, size_t{4099}}) {
          for (size_t i = 0; i < n; ++i) {
            Store(type, Input(type, op, slot, i, workers), buffer, i);
          }
          const std::string what =
              absl::StrCat("slot ", slot, " all_reduce ", name, " ",
                           client::ReduceOpName(op), " of ", n, how);
          COLLECTIVES_RETURN_IF_ERROR(
              c.AllReduceAsync(absl::MakeSpan(buffer, n * Bytes(type)), type,
                               op, options)
                  .Wait(absl::Seconds(30)));
          for (size_t i = 0; i < n; ++i) {
            COLLECTIVES_RETURN_IF_ERROR(Compare(
                what, type, buffer, i, Reference(type, op, i, workers)));
          }
        }
      }
      // Broadcast from the first and the last slot.
      const size_t n = 37;
      for (int root : {0, workers - 1}) {
        for (size_t i = 0; i < n; ++i) {
          Store(type, Input(type, ReduceOp::kSum, slot, i, workers), buffer, i);
        }
        COLLECTIVES_RETURN_IF_ERROR(
            c.BroadcastAsync(absl::MakeSpan(buffer, n * Bytes(type)), type,
                             root, options)
                .Wait(absl::Seconds(30)));
        for (size_t i = 0; i < n; ++i) {
          COLLECTIVES_RETURN_IF_ERROR(Compare(
              absl::StrCat("slot ", slot, " broadcast ", name, " from ", root,
                           how),
              type, buffer, i, Input(type, ReduceOp::kSum, root, i, workers)));
        }
      }
    }
    // All-gather: blocks of 5, worker s supplying block s.
    const size_t block = 5;
    for (size_t i = 0; i < block * workers; ++i) {
      const int owner = static_cast<int>(i / block);
      Store(type,
            owner == slot ? Input(type, ReduceOp::kSum, slot, i, workers) : 99,
            buffer, i);
    }
    COLLECTIVES_RETURN_IF_ERROR(
        c.AllGatherAsync(absl::MakeSpan(buffer, block * workers * Bytes(type)),
                         type)
            .Wait(absl::Seconds(30)));
    for (size_t i = 0; i < block * workers; ++i) {
      const int owner = static_cast<int>(i / block);
      COLLECTIVES_RETURN_IF_ERROR(
          Compare(absl::StrCat("slot ", slot, " all_gather ", name), type,
                  buffer, i, Input(type, ReduceOp::kSum, owner, i, workers)));
    }
    // Reduce-scatter (max): block `slot` reduced, the others untouched.
    for (size_t i = 0; i < block * workers; ++i) {
      Store(type, Input(type, ReduceOp::kMax, slot, i, workers), buffer, i);
    }
    COLLECTIVES_RETURN_IF_ERROR(
        c.ReduceScatterAsync(
             absl::MakeSpan(buffer, block * workers * Bytes(type)), type,
             ReduceOp::kMax)
            .Wait(absl::Seconds(30)));
    for (size_t i = 0; i < block * workers; ++i) {
      const bool mine = static_cast<int>(i / block) == slot;
      COLLECTIVES_RETURN_IF_ERROR(
          Compare(absl::StrCat("slot ", slot, " reduce_scatter ", name), type,
                  buffer, i,
                  mine ? Reference(type, ReduceOp::kMax, i, workers)
                       : Input(type, ReduceOp::kMax, slot, i, workers)));
    }
  }
  return absl::OkStatus();
}

class WorkerCollectives : public ::testing::TestWithParam<std::pair<int, int>> {
};

TEST_P(WorkerCollectives, EveryKindTypeAndOpIsExact) {
  const ClusterOptions options = Shape(GetParam().first, GetParam().second);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<absl::Status> results =
      RunWorkers(cluster, options, EveryCollective);
  for (size_t w = 0; w < results.size(); ++w) {
    EXPECT_TRUE(results[w].ok()) << "worker " << w << ": " << results[w] << "\n"
                                 << cluster.ServerLogs();
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WorkerCollectives,
                         ::testing::Values(std::make_pair(1, 1),
                                           std::make_pair(2, 2),
                                           std::make_pair(3, 1)),
                         [](const auto& info) {
                           return absl::StrCat(info.param.first, "x",
                                               info.param.second);
                         });

// Mistakes fail on every worker, naming what is wrong.
TEST(WorkerCollectivesErrors, LengthsThatDifferAcrossDaemonsFailEveryWorker) {
  const ClusterOptions options = Shape(2, 1);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const std::vector<absl::Status> results =
      RunWorkers(cluster, options, [](client::Client& c) {
        absl::StatusOr<absl::Span<float>> pool = c.Allocate(64);
        if (!pool.ok()) return pool.status();
        const size_t n = c.slot() == 0 ? 10 : 12;
        return c
            .AllReduceAsync(
                absl::MakeSpan(reinterpret_cast<std::byte*>(pool->data()),
                               n * 8),
                DataType::kInt64, ReduceOp::kSum)
            .Wait(absl::Seconds(30));
      });
  // Each worker's error names the mismatch: the descriptors' comparison
  // ("mismatched collective calls"), or, when the longer rank's data reached
  // the other daemon before that daemon compared (its write was held early
  // and lay past the region it registered), the sizes ("wrote 96 bytes ...
  // of 80 bytes ... past the end of the region").
  for (const absl::Status& status : results) {
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(std::string(status.message()),
                ::testing::AnyOf(
                    HasSubstr("mismatched collective calls"),
                    ::testing::AllOf(HasSubstr("wrote 96 bytes"),
                                     HasSubstr("of 80 bytes"),
                                     HasSubstr("past the end of the region"))))
        << status;
  }
}

TEST(WorkerCollectivesErrors, ARootThatIsNoWorkersAndBlocksThatDoNotDivide) {
  const ClusterOptions options = Shape(2, 2);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  std::vector<absl::Status> results =
      RunWorkers(cluster, options, [](client::Client& c) {
        absl::StatusOr<absl::Span<float>> pool = c.Allocate(64);
        if (!pool.ok()) return pool.status();
        return c
            .BroadcastAsync(
                absl::MakeSpan(reinterpret_cast<std::byte*>(pool->data()), 16),
                DataType::kInt32, 4)
            .Wait(absl::Seconds(30));
      });
  for (const absl::Status& status : results) {
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("root slot 4 is not a worker's (the job has 4)"))
        << status;
  }
  results = RunWorkers(cluster, options, [](client::Client& c) {
    absl::StatusOr<absl::Span<float>> pool = c.Allocate(64);
    if (!pool.ok()) return pool.status();
    return c
        .AllGatherAsync(
            absl::MakeSpan(reinterpret_cast<std::byte*>(pool->data()), 4 * 6),
            DataType::kFloat32)
        .Wait(absl::Seconds(30));
  });
  for (const absl::Status& status : results) {
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("6 elements are not 4 equal blocks"))
        << status;
  }
  // A length that is no whole number of elements is refused by the client.
  results = RunWorkers(cluster, options, [](client::Client& c) {
    absl::StatusOr<absl::Span<float>> pool = c.Allocate(64);
    if (!pool.ok()) return pool.status();
    absl::Status status =
        c.AllReduceAsync(
             absl::MakeSpan(reinterpret_cast<std::byte*>(pool->data()), 12),
             DataType::kInt64, ReduceOp::kMax)
            .Wait(absl::Seconds(30));
    if (status.code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(status.message(),
                           "12 bytes are not a whole number of int64")) {
      return absl::InternalError(absl::StrCat("got ", status.ToString()));
    }
    return absl::OkStatus();
  });
  for (const absl::Status& status : results) EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
