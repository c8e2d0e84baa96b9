// Coordinator: one job's control plane (DESIGN.md "Control plane"), version
// 1, as a plain C++ class; coordinator_service.h puts it on gRPC.
//
// Rendezvous. Nodes Join; each Join waits until `expected_nodes` have
// joined, then every waiting Join is answered with the same group: ranks
// are given by sorting the nodes by (hostname, data address), so they do
// not depend on the order of arrival; peers are listed by rank; the shard
// map splits the parameter count contiguously (shard_map.h). A Join with
// another job id or version, or one that comes after the group formed, is
// refused. A Join that waits past its deadline gives up and leaves the
// rendezvous.
//
// Failure detection. Members heartbeat; one silent for longer than
// heartbeat_timeout (by the injected Clock) is marked LOST: logged once,
// counted in starling_coordinator_node_failures_total, recorded as the job's
// last error, and the group is degraded from then on. Heartbeat answers
// tell survivors the lost ranks. Detection runs at the start of every call
// and whenever the owner calls DetectFailures() (main.cc does, on a timer).
// Version 1 does not re-form the group: a lost node stays lost.
//
// Scheduling: GetSchedule hands out K iterations at once
// (schedule_planner.h). ReportStep records timings, loss and errors.
//
// Thread-safe. Join blocks its calling thread (one gRPC thread per waiting
// node); everything else returns at once and never blocks on I/O.
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "server/base/clock.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/schedule_planner.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace coordinator {

class Coordinator {
 public:
  // `clock` and `registry` are borrowed and must outlive the coordinator.
  // InvalidArgument for bad options; AlreadyExists if `registry` already
  // holds the coordinator's metrics.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options, const Clock* clock,
      metrics::MetricsRegistry* registry);

  // Wakes and refuses waiting Joins (Shutdown()).
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Admits a node and blocks until the group forms. Returns at the latest at
  // `deadline` (wall clock: the caller's RPC deadline; capped by
  // options.max_join_wait), or when `cancelled` (polled, may be null)
  // returns true. Errors:
  //   InvalidArgument     wrong job id; missing hostname or data address;
  //                       bad capabilities
  //   FailedPrecondition  version differs (names both versions); the group
  //                       has formed already (unless the same node asks
  //                       again: then it gets its answer again)
  //   AlreadyExists       another waiting node has the same data address
  //   DeadlineExceeded    the group did not form in time (says how many of
  //                       how many nodes have joined)
  //   Cancelled           `cancelled` returned true
  //   Unavailable         the coordinator is shutting down
  absl::StatusOr<proto::JoinResponse> Join(
      const proto::JoinRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled = nullptr);

  // Records that `rank` is alive. FailedPrecondition before the group forms
  // or when `rank` was already marked LOST; InvalidArgument for a wrong job
  // id or unknown rank.
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(
      const proto::HeartbeatRequest& request);

  // The next K iterations for `rank` (schedule_planner.h). Same errors as
  // Heartbeat().
  absl::StatusOr<proto::Schedule> GetSchedule(
      const proto::GetScheduleRequest& request);

  // Records a finished (or failed) step. Same errors as Heartbeat(), plus
  // InvalidArgument for negative or non-finite timings.
  absl::Status ReportStep(const proto::StepReport& request);

  // The whole job. InvalidArgument for a job id other than this one (an
  // empty one means this job).
  absl::StatusOr<proto::JobStatus> GetJobStatus(
      const proto::GetJobStatusRequest& request);

  // Marks members silent for longer than heartbeat_timeout LOST; returns
  // the ranks newly marked (usually none).
  std::vector<int> DetectFailures();

  // Refuses waiting and later Joins with Unavailable. Idempotent.
  void Shutdown();

  const CoordinatorOptions& options() const { return options_; }

 private:
  struct PendingJoin {
    uint64_t id;
    proto::JoinRequest request;
  };
  struct Member {
    proto::JoinRequest join;
    int local_workers = 1;
    proto::NodeHealth health = proto::NODE_HEALTH_HEALTHY;
    absl::Time last_heartbeat;
    std::optional<uint64_t> last_iteration;
    std::string last_error;
    uint64_t shard_elements = 0;
    uint64_t reported_shard_bytes = 0;
    uint64_t reported_optimizer_state_bytes = 0;
  };

  Coordinator(CoordinatorOptions options, const Clock* clock,
              CoordinatorMetrics metrics);

  absl::Status CheckJobId(absl::string_view job_id,
                          absl::string_view what) const;
  absl::Status CheckJoinLocked(const proto::JoinRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member for `rank`, or the error a call from it deserves.
  absl::StatusOr<Member*> LiveMemberLocked(int rank, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::JoinResponse JoinResponseLocked(int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> DetectFailuresLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteIterationLocked(Member* member, uint64_t iteration)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RendezvousProgressLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGroupGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const Clock* const clock_;
  const CoordinatorMetrics metrics_;

  mutable absl::Mutex mu_;
  // Signalled when the group forms or shutdown begins.
  absl::CondVar changed_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_join_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<PendingJoin> pending_ ABSL_GUARDED_BY(mu_);
  // Set once, when the group forms.
  bool formed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t group_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Index = rank.
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  // Join id -> rank, for the Joins that were waiting when the group formed.
  std::vector<std::pair<uint64_t, int>> rank_of_join_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::ShardRange> shard_map_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SchedulePlanner> planner_ ABSL_GUARDED_BY(mu_);
  bool degraded_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> lost_ranks_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> highest_iteration_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_H_
