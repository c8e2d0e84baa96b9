// What coordinator.cc (formation, membership, heartbeats) and
// coordinator_runs.cc (runs, schedules) of the one Coordinator class share:
// the bound on a node's declared workers, the cancellation poll and the way
// durations are written in messages. Private to //server/coordinator:
// coordinator. Constants and pure functions; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_COMMON_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_COMMON_H_

#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace starling {
namespace coordinator {
namespace internal {

// Most local workers one node may declare; more is a garbled request.
inline constexpr int kMaxLocalWorkers = 4096;
// The longest hostname a node may give (DNS's bound on a name).
inline constexpr size_t kMaxHostnameBytes = 253;
// How often a Join or BeginRun with a cancellation check looks at it.
inline constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

// "6s", "5.001s", "250ms": exact to the millisecond.
inline std::string Seconds(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}

// The workers a joining node declares (at least 1).
inline int LocalWorkers(const proto::JoinRequest& request) {
  return std::max(1, request.capabilities().local_workers());
}

}  // namespace internal
}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_COMMON_H_
