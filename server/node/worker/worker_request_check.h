// ParseWorkerRequest: the daemon's parser of what a worker sends
// (proto/worker.proto): the protobuf decode plus a check of every field a
// worker controls, so that the rest of the daemon sees only requests within
// these bounds. The bounds are generous for real models and small enough
// that no arithmetic on them overflows. Fuzzed by
// tests/fuzz/worker_request_fuzzer.cc. Stateless; thread-safe.
#ifndef STARLING_SERVER_NODE_WORKER_WORKER_REQUEST_CHECK_H_
#define STARLING_SERVER_NODE_WORKER_WORKER_REQUEST_CHECK_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/worker.pb.h"

namespace starling {
namespace node {

inline constexpr size_t kMaxTensorNameBytes = 256;
inline constexpr size_t kMaxWorkerNameBytes = 256;
inline constexpr int kMaxTensorRank = 16;
// Elements of one tensor, one slice, or a whole pool's worth of floats.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 40;
inline constexpr int kMaxSlicesPerRequest = 65536;
inline constexpr uint64_t kMaxPoolBytes = uint64_t{1} << 42;

// Decodes and checks one request. InvalidArgument naming the field and the
// value for anything out of bounds; DataLoss for bytes that do not decode.
absl::StatusOr<proto::WorkerRequest> ParseWorkerRequest(
    absl::string_view bytes);

// The decoding alone (DataLoss for bytes that do not decode: a broken
// protocol), and the check alone, for a decoded request.
absl::StatusOr<proto::WorkerRequest> DecodeWorkerRequest(
    absl::string_view bytes);
absl::Status CheckWorkerRequest(const proto::WorkerRequest& request);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_WORKER_WORKER_REQUEST_CHECK_H_
