// SharedRounds: the bytes of the rounds every training mode has, between
// the workers' pools, a staging buffer and the other daemons:
//   - a worker collective (all-reduce, broadcast, all-gather,
//     reduce-scatter): the workers' buffers combined locally into the
//     staging buffer (one pass), the collective across daemons there, and
//     the result copied back into each worker's buffer;
//   - a run's initial parameters (version 0): one worker's commit supplies
//     them, checked against the run's tables (CheckInitialParameters), and
//     every daemon takes the first supplier's in (rank, worker index) order
//     (InitializeParameters).
//
// Copies in user space, counted in NodeMetrics::allreduce_staging_copied_
// bytes: the all-reduce staging reads each buffer once, writes the sum once,
// then reads it and writes each buffer once per worker (none of that for
// one worker's scratch buffer).
//
// Thread safety: confined to the run manager's step thread (the staging
// buffer is shared); no call takes a lock, the collectives block up to the
// call's timeout, so callers hold none either.
#ifndef STARLING_SERVER_NODE_RUN_SHARED_ROUNDS_H_
#define STARLING_SERVER_NODE_RUN_SHARED_ROUNDS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/common.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/telemetry/node_metrics.h"

namespace starling {
namespace node {

class SharedRounds {
 public:
  // `comm` and `metrics` are borrowed and must outlive this.
  SharedRounds(collective::Communicator* comm, NodeMetrics* metrics);
  SharedRounds(const SharedRounds&) = delete;
  SharedRounds& operator=(const SharedRounds&) = delete;

  // A worker collective round (proto::CollectiveRequest: all-reduce,
  // broadcast, all-gather or reduce-scatter, of any element type and
  // reduce op), over the run's `total_workers` workers numbered by slot:
  // the local workers' buffers combined into the staging buffer, the
  // collective across daemons there, the result copied into each buffer.
  // A failed collective leaves the buffers as they were, except that an
  // all-reduce or broadcast whose one local worker marked its buffer as
  // scratch (CollectiveRequest.scratch) runs in that buffer. Errors are
  // annotated with `where`; FailedPrecondition for the slot-numbered kinds
  // when daemons have unequal worker counts, InvalidArgument for a length
  // the workers do not divide into blocks or a root that is no worker's.
  absl::Status Collective(const std::vector<Round>& rounds, int total_workers,
                          const std::string& where,
                          const collective::CallOptions& call);

  // OK when the commit `supplier` carries initial parameters that `tensors`
  // (the local table) can take: each names a declared tensor, has its size
  // and lies in the supplier's pool. InvalidArgument naming the tensor and
  // the worker otherwise.
  static absl::Status CheckInitialParameters(
      const Round& supplier, const std::vector<proto::TensorSpec>& tensors);

  // The initial parameters `supplier` gives, as float32: for each tensor
  // of `tensors` it gives, in table order, the tensor's index and values.
  // REQUIRES: `supplier` passed CheckInitialParameters.
  using InitialValues = std::vector<std::pair<size_t, std::vector<float>>>;
  static absl::StatusOr<InitialValues> InitialValuesOf(
      const Round& supplier, const std::vector<proto::TensorSpec>& tensors);
  // CRC32C over `values` (each tensor's index and float32 bytes).
  static uint32_t InitialCrc32c(const InitialValues& values);
  // OK when `a` (from worker `a_name`) and `b` are the same, bit for bit;
  // else InvalidArgument naming both workers, the tensor and its first
  // element that differs (or the tensor only one of them set).
  static absl::Status CompareInitialValues(
      const InitialValues& a, absl::string_view a_name, const InitialValues& b,
      absl::string_view b_name, const std::vector<proto::TensorSpec>& tensors);

  // Version 0 of a new run on every daemon: the values of the first
  // worker in (rank, worker index) order that set the run's own (not
  // offered: CommitTensorsRequest.offered), or else of the first that
  // offered some, `supplier` being this daemon's (null if none of its
  // workers gave any), agreed by a one-integer all-reduce and broadcast
  // from that rank; zeros when no daemon has one.
  // Fills run.store->parameters() (the engine takes its master from there:
  // RunEngine::ParametersReady). REQUIRES: `supplier` passed
  // CheckInitialParameters; the parameters are the caller's.
  absl::Status InitializeParameters(const Round* supplier, Run& run,
                                    const collective::CallOptions& call);

 private:
  collective::Communicator* const comm_;
  NodeMetrics* const metrics_;
  std::vector<uint64_t> scratch_;  // collectives' staging buffer
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_SHARED_ROUNDS_H_
