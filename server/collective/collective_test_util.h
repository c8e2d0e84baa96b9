// Test helpers for the collectives (testonly): run one Communicator per rank
// on its own thread over a transport group, generate deterministic inputs,
// and check results against an fp64 reference.
//
// Tolerance (floats; integers and min/max must match exactly): every
// algorithm adds each rank's value into an element exactly once, N-1
// additions in all, in an algorithm-specific order. Each addition rounds
// with relative error at most u (the unit roundoff: 2^-24 fp32, 2^-53 fp64,
// 2^-11 fp16, 2^-8 bf16; fp16/bf16 round back after each fp32 addition) of a
// partial sum bounded by S = sum_i |x_i|, so |computed - exact| <= (N-1) u S.
// We allow N u S, plus N * 2^-24 for fp16 (absolute error of subnormal
// results). kAverage divides the sum once more: the bound divided by N plus
// 2u |reference|. Thread-compatible.
#ifndef STARLING_SERVER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_
#define STARLING_SERVER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/collective/communicator.h"
#include "server/collective/data_type.h"
#include "server/collective/op_descriptor.h"
#include "server/transport/transport.h"

namespace starling {
namespace collective {

// One cell of the test grid.
struct GridCase {
  int size = 1;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t chunk_bytes = ChunkPlanner::kDefaultChunkBytes;
  // SelectorOptions::doubling_max_bytes: the butterfly's recursive doubling
  // for small all-reduces (0: always recursive halving + doubling).
  size_t doubling_max_bytes = SelectorOptions().doubling_max_bytes;
  std::string ToString() const;
};

// Group sizes 1-9, 13, 16 x lengths {0, 1, N-1, 2, 7, 97, 4N+3} x every
// dtype and op (or only float32 sum when `all_types` is false), with small
// chunks so that every step is cut into several chunks.
std::vector<GridCase> SmallGrid(bool all_types);

// Runs body(rank, communicator) on `transports.size()` threads, one
// Communicator per transport; returns each rank's status.
using RankBody = std::function<absl::Status(int rank, Communicator* comm)>;
std::vector<absl::Status> RunRanks(
    const std::vector<transport::Transport*>& transports,
    const CommunicatorOptions& options, const RankBody& body);

// The same over a fresh LoopbackFabric of `size` ranks.
std::vector<absl::Status> RunOnLoopback(int size,
                                        const CommunicatorOptions& options,
                                        const RankBody& body);

// OK if every status is OK, else the first failure prefixed by its rank.
absl::Status FirstError(const std::vector<absl::Status>& statuses);

// Runs the op of `kind` with `algorithm` for `c` on the given transports (a
// fresh loopback fabric when empty) and checks every rank's result against
// the fp64 reference. Broadcast uses root `c.size - 1`.
absl::Status CheckCollective(
    OpKind kind, Algorithm algorithm, const GridCase& c,
    const std::vector<transport::Transport*>& transports = {});

// The grid a real transport runs once per group size: every algorithm and
// op on lengths 0, 1, size - 1, 97 and 100003 (float32 sum), then every
// dtype and reduction once (butterfly all-reduce of 1009). The first
// mismatch, naming the case.
absl::Status CheckGridOnTransports(
    const std::vector<transport::Transport*>& transports);

// The input of `rank`: `count` deterministic values of `type` (floats in
// [-1, 1) rounded to the type, integers in [-1000, 1000]).
std::vector<std::byte> MakeInput(DataType type, size_t count, int rank,
                                 uint64_t seed);

// Element `i` of a `type` buffer as a double.
double ElementAt(DataType type, const std::vector<std::byte>& buffer, size_t i);

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_COLLECTIVE_TEST_UTIL_H_
