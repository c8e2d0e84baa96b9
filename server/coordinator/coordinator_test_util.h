// Helpers for tests of the Coordinator class: options, requests from
// numbered nodes ("node-i" at 10.0.0.i:29500), forming a group from
// threads. Testonly; thread-compatible.
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator/coordinator.h"

namespace starling {
namespace coordinator {

// Job "job-a" of `nodes` nodes, parameter count 0 (as declared); a LOST
// member keeps its rank for an hour (rejoin_grace).
CoordinatorOptions TestOptions(int nodes);

proto::JoinRequest JoinRequestFor(int i, int local_workers = 1);

// Joins nodes 0..n-1 concurrently; their answers by node.
std::vector<absl::StatusOr<proto::JoinResponse>> JoinAll(
    Coordinator* coordinator, int n);

proto::HeartbeatRequest Beat(int rank, uint64_t group_epoch = 1);

// Rank `rank`'s BeginRun with table {w: 1000, b: 10}, 2 local workers and
// next_op_seq 10 + rank.
proto::BeginRunRequest BeginFor(int rank);

// Calls BeginRun for each of `ranks` on its own thread (deadline 20s from
// now unless `deadline` is given) and returns the answers, by position.
std::vector<absl::StatusOr<proto::BeginRunResponse>> BeginAll(
    Coordinator* coordinator, const std::vector<proto::BeginRunRequest>& ranks,
    absl::Time deadline = absl::InfiniteFuture());

// Forms a group of `nodes` (JoinAll) and begins run 1 on every rank
// (BeginAll); returns the join answers by node, empty if a join or the
// begin failed (the failure is a test failure, EXPECTed here).
std::vector<proto::JoinResponse> FormAndBeginRunOne(Coordinator* coordinator,
                                                    int nodes);

proto::EndRunRequest EndFor(int rank, uint64_t run_id,
                            proto::RunStatus::State state, int64_t steps,
                            const std::string& error = "",
                            int64_t failed_step = -1);

// Waits (up to 10s, polling GetJobStatus) until `ready` holds for the
// status; returns whether it did.
bool WaitForStatus(Coordinator* coordinator,
                   const std::function<bool(const proto::JobStatus&)>& ready);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_TEST_UTIL_H_
