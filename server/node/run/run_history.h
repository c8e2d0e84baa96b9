// RunHistory: the runs a RunManager ended, newest last, and what a request
// of an ended run is told.
//
// Thread-compatible: RunManager holds it under its mutex (ABSL_GUARDED_BY).
#ifndef STARLING_SERVER_NODE_RUN_RUN_HISTORY_H_
#define STARLING_SERVER_NODE_RUN_RUN_HISTORY_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "server/node/run/run.h"

namespace starling {
namespace node {

// Seconds since the Unix epoch, as RunStatus carries times.
double UnixSeconds(absl::Time t);

// `run` in `state` after `steps` steps: run id, steps, parameter count,
// total workers and start time filled; the end time and error are the
// caller's.
proto::RunStatus RunStatusOf(const Run& run, proto::RunStatus::State state,
                             int64_t steps);

// What a worker is told of a run that ended FAILED (`status`): Aborted,
// "run R failed at step S: <error>", or for a suspended one (its group
// lost a daemon) "run R stopped at step S: <error>; it goes on ...:
// reconnect to resume (Client::Rejoin)".
absl::Status FailedRunError(const proto::RunStatus& status);

class RunHistory {
 public:
  // Keeps the last max(1, `capacity`) runs.
  explicit RunHistory(int capacity);

  // Records an ended run (FINISHED or FAILED), dropping the oldest beyond
  // the capacity.
  void Record(const proto::RunStatus& status);

  // The error a request of run `run_id` gets once that run is not the
  // running one: Aborted with its failure (for a suspended one, that it may
  // go on: reconnect to resume), FailedPrecondition once it finished or
  // when it is no longer kept.
  absl::Status StaleRunError(uint64_t run_id) const;

  // Newest first.
  std::vector<proto::RunStatus> Recent() const;
  // The newest, or null if none ended yet.
  const proto::RunStatus* last() const;

 private:
  const int capacity_;
  std::deque<proto::RunStatus> runs_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_HISTORY_H_
