// Coordinator: one job's control plane (DESIGN.md "Control plane") as a
// plain C++ class; coordinator_service.h puts it on gRPC.
//
// Rendezvous. Nodes Join; each Join waits until `expected_nodes` have
// joined, then every waiting Join is answered with the same group: ranks
// are given by sorting the nodes by (hostname, data address), so they do
// not depend on the order of arrival; peers are listed by rank; the shard
// map splits the parameter count contiguously (shard_map.h). A Join with
// another job id or version, or one that comes after the group formed, is
// refused. A Join that waits past its deadline gives up and leaves the
// rendezvous. A member heartbeats from the moment its Join returned, while
// it forms its data plane.
//
// Failure detection. Members heartbeat; one silent for longer than
// heartbeat_timeout (by the injected Clock), or for longer than
// SuspectSilence (coordinator_options.h) after a peer reported it vanished
// from the data plane (HeartbeatRequest.peers_vanished), is marked LOST:
// logged once,
// counted in starling_coordinator_node_failures_total, recorded as the job's
// last error, and the current run fails. The group is degraded while a
// member is LOST. Heartbeat answers tell survivors the lost ranks. A LOST
// member that heartbeats again within options.rejoin_grace is HEALTHY
// again (logged), and the group re-forms with the same members (a new
// epoch: its peers dropped their connections to it). Detection runs at the
// start of every call and whenever the owner calls DetectFailures() (main.cc
// does, on a timer).
//
// Re-formation (proto/coordinator.proto). A member LOST for rejoin_grace is
// dropped and the group re-forms from the others with the next epoch: ranks
// re-numbered as at formation, a new shard map, group key and schedule,
// the run in progress failed, waiting BeginRuns answered Unavailable. A
// node that joins after formation is taken the same way once no run is
// running or beginning and no member is LOST within its grace (its Join
// waits until then, bounded by its deadline); a member that joins afresh
// has restarted, and its old self is LOST (and dropped) at once. Nodes
// beyond expected_nodes are refused; a re-formation that would leave fewer
// than min_nodes waits (the group stays degraded). Members learn of the new
// epoch from their next call: NotFound for the old epoch, then Rejoin with
// the old epoch returns their place in the new group.
//
// Restarts. With a record (options.state_file or options.state_etcd:
// state_store.h) the coordinator records the group (epoch, members, group
// key, shard map) and the runs whenever they change, on a thread of its own (no
// lock held while it writes), and a coordinator started on that record resumes
// it: the members show as JOINING until they re-register (Rejoin), checked
// against the record, and are marked LOST if they do not within
// heartbeat_timeout; run ids continue. A restored group that no member
// re-registers with is given up when a node joins afresh (a restarted
// member, or anyone once every member is LOST): the next group forms with
// the epoch after it, so a stale daemon of the old group never matches.
// Without a state file a restarted coordinator knows no group: members'
// calls are answered NotFound, and the first Rejoin makes it adopt the
// group the node reports (epoch, peers, shard map, its run); the others
// re-register as above.
//
// Runs (run_book.h). BeginRun waits until every member asked, then answers
// all at once: a new run id, the agreed tensor table, the first op sequence
// number. EndRun records a run's end on one rank; a failure is told to the
// others in their heartbeat answers.
//
// Scheduling: GetSchedule hands out K iterations at once
// (schedule_planner.h). ReportStep records timings, loss and errors.
//
// Thread-safe. Join and BeginRun block their calling thread (one gRPC thread
// per waiting node); everything else returns at once and never blocks on
// I/O.
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"
#include "proto/coordinator_state.pb.h"
#include "server/base/call_credential.h"
#include "server/base/clock.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/etcd_store.h"
#include "server/coordinator/run_book.h"
#include "server/coordinator/schedule_planner.h"
#include "server/coordinator/state_file.h"
#include "server/coordinator/state_persister.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace coordinator {

class Coordinator {
 public:
  // `clock` and `registry` are borrowed and must outlive the coordinator.
  // InvalidArgument for bad options; AlreadyExists if `registry` already
  // holds the coordinator's metrics; the state file's errors (DataLoss for
  // one that is not a whole record), FailedPrecondition for one of another
  // job.
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
  //                       has expected_nodes members already
  //   AlreadyExists       another waiting node has the same data address
  //   DeadlineExceeded    the group did not form in time (says how many of
  //                       how many nodes have joined)
  //   Cancelled           `cancelled` returned true
  //   Unavailable         the coordinator is shutting down
  absl::StatusOr<proto::JoinResponse> Join(
      const proto::JoinRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled = nullptr);

  // Re-registers a member of a running group after a coordinator restart
  // (see above) or confirms one this coordinator knows. Returns at once
  // with the group as it now stands. Errors:
  //   InvalidArgument     wrong job id; malformed request (rank outside the
  //                       peers it lists, its own address differs)
  //   FailedPrecondition  version differs; the node's group differs from
  //                       the one this coordinator runs (epoch, size or
  //                       addresses), or its size from expected_nodes; the
  //                       group re-formed without the node (it joins afresh)
  //   Unavailable         the coordinator is shutting down
  // Who made a call, as its metadata says (server/base/call_credential.h):
  // the identity it claims and its credential for this call.
  struct Caller {
    std::string host;
    std::string address;
    std::string credential;
    // The names its verified client certificate gives (common name and
    // subjectAltNames); empty without one.
    std::vector<std::string> certified;
  };
  // With certified_identities (mutual TLS), first: the hostname `caller`
  // claims must be one its client certificate names.
  // OK when this coordinator has no cluster secret, or when `caller`'s
  // credential is a fresh member credential for `call`, this job and the
  // identity it claims, under the secret for Join and Rejoin and under
  // that identity's own member key (JoinResponse.member_key) for every
  // other call once it has one (a node refused under its key re-registers,
  // proving the secret: a coordinator restarted without its record), and,
  // for a call
  // that names `rank`
  // (-1: none) of the current group epoch (`epoch`, or 0: no epoch, taken
  // as the current one), that identity is that rank's member.
  // PermissionDenied naming `call`, the identity and what is wrong
  // otherwise (counted in calls_refused_total{call}). Calls of an earlier
  // epoch are left to the call itself (a renumbered member's are stale,
  // not forged).
  absl::Status CheckCaller(absl::string_view call, const Caller& caller,
                           int rank, uint64_t epoch);
  // For the operators' calls (GetJobStatus): OK when this coordinator has
  // neither secret, or when `caller`'s credential is a fresh operator
  // credential for `call` under the operator secret or the cluster secret.
  // PermissionDenied (counted) otherwise.
  absl::Status CheckOperator(absl::string_view call, const Caller& caller);

  absl::StatusOr<proto::JoinResponse> Rejoin(
      const proto::RejoinRequest& request);

  // Records that `rank` is alive and what it runs; revives it if it was
  // LOST. InvalidArgument for a wrong job id or a rank outside the group;
  // NotFound when this coordinator does not know the sender's group (no
  // group, another group epoch, or not re-registered since a restart).
  absl::StatusOr<proto::HeartbeatResponse> Heartbeat(
      const proto::HeartbeatRequest& request);

  // Waits until every member asked to begin a run, then answers all (see
  // run_book.h RunBook::Begin). Returns at the latest at `deadline` (capped
  // by options.max_join_wait) or when `cancelled` (polled, may be null)
  // returns true. Errors, beside Heartbeat()'s:
  //   InvalidArgument   the round's tables disagree, a rank reported an
  //                     error, or --parameter_count differs (every waiting
  //                     rank gets the same)
  //   Unavailable       a member is LOST (naming the ranks), or shutdown
  //   DeadlineExceeded  not every member asked in time (naming the ranks
  //                     that have not ended their declarations)
  //   Aborted           a newer BeginRun from the same rank replaced it
  //   Cancelled         `cancelled` returned true
  absl::StatusOr<proto::BeginRunResponse> BeginRun(
      const proto::BeginRunRequest& request, absl::Time deadline,
      const std::function<bool()>& cancelled = nullptr);

  // Records that a run ended on `rank`. Heartbeat()'s errors, plus
  // InvalidArgument for a run id of 0 or a state other than FINISHED or
  // FAILED.
  absl::Status EndRun(const proto::EndRunRequest& request);

  // The next K iterations for `rank` (schedule_planner.h). Same errors as
  // Heartbeat(), plus FailedPrecondition while `rank` is LOST.
  absl::StatusOr<proto::Schedule> GetSchedule(
      const proto::GetScheduleRequest& request);

  // Records a finished (or failed) step. Same errors as GetSchedule(), plus
  // InvalidArgument for negative or non-finite timings.
  absl::Status ReportStep(const proto::StepReport& request);

  // The whole job. InvalidArgument for a job id other than this one (an
  // empty one means this job).
  absl::StatusOr<proto::JobStatus> GetJobStatus(
      const proto::GetJobStatusRequest& request);

  // Marks members silent for longer than heartbeat_timeout LOST and
  // re-forms the group when it is due; returns the ranks newly marked
  // (usually none).
  std::vector<int> DetectFailures();

  // Refuses waiting and later Joins and BeginRuns with Unavailable; writes
  // the state file a last time. Idempotent.
  void Shutdown();

  const CoordinatorOptions& options() const { return options_; }

  // Waits until the state file holds every change made so far (its write's
  // error, or DeadlineExceeded); OK at once without a state file.
  absl::Status FlushStateForTesting(absl::Time deadline);

 private:
  struct PendingJoin {
    uint64_t id;
    proto::JoinRequest request;
  };
  struct Member {
    proto::JoinRequest join;
    int local_workers = 1;
    proto::NodeHealth health = proto::NODE_HEALTH_HEALTHY;
    // When it was marked LOST (the grace counts from here); InfinitePast
    // for a member that restarted (dropped at once).
    absl::Time lost_since = absl::InfiniteFuture();
    // Why ("no heartbeat for 6s (timeout 5s)").
    std::string lost_why;
    // A peer reported it vanished from the data plane (its connections
    // ended): from then on, one missed heartbeat slot makes it LOST.
    absl::Time suspected_at = absl::InfiniteFuture();
    std::string suspected_by;
    // False after an adoption until this member re-registered (JOINING).
    bool registered = true;
    // A member of the epoch before, carried into this one by a
    // re-formation: it learns its new place by a Rejoin with the old epoch
    // (until it is heard from in this one). A member that entered by a
    // Join has its answer already.
    bool carried_over = false;
    absl::Time last_heartbeat;
    // A heartbeat came since the group formed: the member has its join
    // answer, so a join in its name is not a retry (and gets no group key).
    bool heard_from = false;
    std::optional<uint64_t> last_iteration;
    std::string last_error;
    uint64_t shard_elements = 0;
    uint64_t reported_shard_bytes = 0;
    uint64_t reported_optimizer_state_bytes = 0;
    // From the last heartbeat.
    std::vector<proto::WorkerStatus> workers;
    proto::RunStatus run;
    // How its data-plane writes travel ("" : not known).
    std::string transport;
  };
  struct BeginCall {
    uint64_t id;
    proto::BeginRunRequest request;
  };

  Coordinator(CoordinatorOptions options, const Clock* clock,
              CoordinatorMetrics metrics);

  absl::Status CheckJobId(absl::string_view job_id,
                          absl::string_view what) const;
  absl::Status CheckNodeLocked(const proto::JoinRequest& request,
                               absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The member for `rank` of `group_epoch` (0: not checked), or the error a
  // call from it deserves (NotFound: unknown group; see Heartbeat()).
  absl::StatusOr<Member*> MemberLocked(int rank, uint64_t group_epoch,
                                       absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MemberLocked, and FailedPrecondition while it is LOST.
  absl::StatusOr<Member*> LiveMemberLocked(int rank, uint64_t group_epoch,
                                           absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FormGroupLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether member `m` is alive: heard from in its epoch, heartbeating
  // within two periods, not reported vanished by a peer, not LOST.
  bool AliveLocked(const Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Join naming a member's hostname and data address while that member
  // is alive (heartbeating within two periods, not reported vanished by a
  // peer) waits for it to fall silent, until `deadline`: then
  // FailedPrecondition (counted as a refused Join). A daemon restarted in
  // its own place waits at most two heartbeat periods; a process that
  // claims a live member's place gets nothing.
  absl::Status AwaitMemberSilenceLocked(const proto::JoinRequest& request,
                                        absl::Time deadline,
                                        const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Join after formation: the same node asking again gets its answer; a
  // member that restarted is marked LOST; a node that does not fit is
  // refused. OK: the caller adds it to pending_.
  absl::StatusOr<std::optional<proto::JoinResponse>> LateJoinLocked(
      const proto::JoinRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-forms the group (see above) if it is due; true if it did.
  bool ReformIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The group of `survivors` (members carried over: who they are, their
  // health and registration kept) and `joins`, sorted into ranks here, with
  // the next epoch and a new key.
  void InstallGroupLocked(std::vector<Member> survivors,
                          std::vector<PendingJoin> joins)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogRanksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks `rank` LOST for `why` (logged, counted, the job's last error; the
  // current run fails).
  void MarkLostLocked(int rank, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the current run can go on without a lost member: a mode of the
  // synchronous step keeping buddy replicas (JobConfig.replicas > 0, an
  // optimizer other than none) or durable checkpoints, and a run running.
  bool CanCarryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A run suspended on some rank for a peer's loss with no member LOST
  // within twice the heartbeat timeout: nothing will carry it; it fails.
  void CheckSuspendedLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank of the member that is `node` (hostname and data address), or
  // -1.
  int RankOfLocked(const proto::JoinRequest& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member `rank` is `node`, re-registered: HEALTHY, heard from now, in
  // `run` (run ids continue above `highest_run_id`).
  void RegisterLocked(int rank, const proto::JoinRequest& node,
                      const proto::RunStatus& run, uint64_t highest_run_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A Rejoin of an earlier epoch: the node's place in the group now, or
  // FailedPrecondition when the group re-formed without it.
  absl::StatusOr<proto::JoinResponse> MoveToCurrentEpochLocked(
      const proto::RejoinRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdoptGroupLocked(const proto::RejoinRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a restart: the next rank's member as recorded or reported, JOINING
  // until it re-registers (its silence counted from `now`).
  void AddAwaitedMemberLocked(proto::JoinRequest join, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSameGroupLocked(const proto::RejoinRequest& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildPlannerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // planner_ continues an earlier group's plan (a run went on), or is to.
  bool PlanContinuedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each member's local workers (at least 1), by rank, and their sum.
  std::vector<int> WorkersPerRankLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int TotalWorkersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Before a schedule request from `next_iteration`: a pending rebase
  // continues the plan from there for the current members;
  // FailedPrecondition for an iteration an earlier group's plan covered.
  absl::Status RebaseScheduleLocked(uint64_t next_iteration)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a cluster secret, a new key for `node`'s identity, kept (and
  // persisted) and set in `response`; nothing otherwise.
  void IssueMemberKeyLocked(const proto::JoinRequest& node,
                            proto::JoinResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::JoinResponse JoinResponseLocked(int rank) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> DetectFailuresLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteIterationLocked(Member* member, uint64_t iteration)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a run's end reported by `rank` (EndRun, or a heartbeat's run).
  void EndRunLocked(int rank, const proto::EndRunRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DecideBeginLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run `begun` goes on from (BeginRunResponse.resume_run_id): with
  // durable checkpoints, the newest of `before` (the runs before it) if it
  // failed and had as many parameters; else 0.
  uint64_t ResumeFromLocked(const std::vector<proto::RunStatus>& before,
                            const proto::BeginRunResponse& begun) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string BeginProgressLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> LostRanksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeLocked(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string RendezvousProgressLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGroupGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // starling_coordinator_workers{rank,state} from a heartbeat's workers.
  void UpdateWorkerGaugesLocked(int rank,
                                const std::vector<proto::WorkerStatus>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The state file (see above): the record of now, a record resumed, and
  // a change to record (the persister thread writes the latest).
  proto::CoordinatorState Snapshot() const;
  void RestoreLocked(const proto::CoordinatorState& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirtyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fresh Join while the group was restored and no member has
  // re-registered: gives the group up (see above), or waits (bounded by
  // `deadline`) for a member to re-register or every one to be LOST.
  absl::Status SettleRestoredGroupLocked(const proto::JoinRequest& request,
                                         absl::Time deadline,
                                         const std::function<bool()>& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void GiveUpRestoredGroupLocked(const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  const Clock* const clock_;
  const CoordinatorMetrics metrics_;
  // Takes each call credential once (thread-safe on its own).
  CallVerifier verifier_;

  mutable absl::Mutex mu_;
  // Signalled when the group forms or is adopted, a BeginRun round is
  // decided or a waiting call is replaced, a member is lost, or shutdown
  // begins.
  absl::CondVar changed_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<PendingJoin> pending_ ABSL_GUARDED_BY(mu_);
  // Set once, when the group forms or is adopted.
  bool formed_ ABSL_GUARDED_BY(mu_) = false;
  // Why a Join waiting when the group was adopted gets no rank.
  std::string adopted_from_ ABSL_GUARDED_BY(mu_);
  uint64_t group_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Drawn when the group formed; members' data-plane handshakes prove it
  // (JoinResponse.group_key). Empty for an adopted group.
  std::string group_key_ ABSL_GUARDED_BY(mu_);
  // With a cluster secret: each member's key, by MemberKeyName().
  absl::flat_hash_map<std::string, std::string> member_keys_
      ABSL_GUARDED_BY(mu_);
  // Index = rank.
  std::vector<Member> members_ ABSL_GUARDED_BY(mu_);
  // Why the group last re-formed (JoinResponse.reformed_because).
  std::string reformed_because_ ABSL_GUARDED_BY(mu_);
  // The run that goes on in the current group (JoinResponse
  // carried_run_id), 0 if none.
  uint64_t carried_run_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The group re-formed while its run went on: planner_ is still the old
  // group's, and the first schedule request of the new group continues it
  // from the iteration asked (the one the run goes on at).
  bool schedule_rebase_pending_ ABSL_GUARDED_BY(mu_) = false;
  // When a rank first reported the current run suspended (RunStatus
  // suspended), and which; InfiniteFuture when none did.
  absl::Time suspended_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::string suspended_on_ ABSL_GUARDED_BY(mu_);
  absl::Time reformed_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Why the last due re-formation could not happen (logged once).
  std::string reform_blocked_ ABSL_GUARDED_BY(mu_);
  // Members back from LOST within their grace since the last re-formation
  // ("rank 1 (...) back after 3s"): the group re-forms with them.
  std::vector<std::string> came_back_ ABSL_GUARDED_BY(mu_);
  // Who left the group at the last re-formation, and why (for the
  // refusal of their Rejoin): data address -> reason.
  std::map<std::string, std::string> dropped_ ABSL_GUARDED_BY(mu_);
  std::vector<proto::ShardRange> shard_map_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<SchedulePlanner> planner_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> highest_iteration_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  RunBook runs_ ABSL_GUARDED_BY(mu_);
  // The group came from the state file and none of its members has
  // re-registered since.
  bool restored_ ABSL_GUARDED_BY(mu_) = false;
  // Writes the state file; null without one. Set by Create, before any
  // call, then constant.
  std::unique_ptr<StatePersister> persister_;

  // The BeginRun round in progress: rank -> its waiting call.
  std::map<int, BeginCall> begin_waiting_ ABSL_GUARDED_BY(mu_);
  // Answers for decided or replaced calls, by call id, until collected.
  std::map<uint64_t, absl::StatusOr<proto::BeginRunResponse>> begin_answers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_H_
