// What the synchronous step's tests over loopback groups share: a small
// model of three tensors in two buckets, initial values every rank computes
// alike, and a run started at version 0 from them.
#ifndef STARLING_SERVER_NODE_SYNC_SYNC_TEST_UTIL_H_
#define STARLING_SERVER_NODE_SYNC_SYNC_TEST_UTIL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/node/run/run_factory.h"
#include "server/node/sync/sync_run.h"

namespace starling {
namespace node {

// Three tensors "t0".."t2" of `sizes` elements in two buckets (bucket 0
// holds the last declared).
std::vector<proto::TensorSpec> ThreeTensors(
    proto::DataType dtype, const std::array<int64_t, 3>& sizes);

// Element i's initial value: alike on every rank and exact in 16 bits
// (k / 64, |k| < 1024).
float InitialValue(uint64_t i);

// A run of `tensors` created with `options`, its parameters set to
// InitialValue and its master shard taken from them (version 0).
absl::StatusOr<std::shared_ptr<SyncRun>> StartRunAtVersion0(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_SYNC_TEST_UTIL_H_
