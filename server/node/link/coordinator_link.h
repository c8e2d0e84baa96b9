// CoordinatorLink: a node daemon's connection to its job's coordinator
// (proto/coordinator.proto), the only way server/node reaches it. It owns
// the gRPC channel and does, for the daemon:
//
//   - Join: reaches the coordinator (retrying while it is unreachable and
//     logging why: connection refused, DNS failure) and waits for the group;
//   - heartbeats, from the moment Join returned (while the daemon forms its
//     data plane, and for as long as the link lives), on the link's own
//     thread, with the node's live status from a callback; the answers'
//     lost ranks and failed runs go to callbacks;
//   - re-registration: when the coordinator answers that it does not know
//     this node's group (it restarted), the link re-registers (Rejoin) with
//     its rank, group epoch, peers, shard map and current run, and goes on;
//     training is not disturbed;
//   - re-formation: when the coordinator re-formed the group (a new epoch,
//     proto/coordinator.proto), the re-registration answers with this
//     node's place in it, or refuses a node that was dropped, which then
//     joins afresh (waiting, on the link's thread, to be taken in between
//     runs); either way the new group goes to on_regroup, and calls of the
//     old epoch in flight (BeginRun, GetSchedule) fail naming the new one;
//   - BeginRun, a blocking call with a deadline for the daemon's step
//     thread; GetSchedule, likewise, for a worker's session thread; EndRun and
//     step failures, queued and sent by the link's thread at once (and retried
//     while the coordinator is unreachable or restarting).
//
// No lock is held across an RPC or a callback.
//
// Thread-safe. Join, BeginRun and GetSchedule block their calling thread (at
// most until their deadline, or Stop()); callbacks run on the link's thread.
#ifndef STARLING_SERVER_NODE_LINK_COORDINATOR_LINK_H_
#define STARLING_SERVER_NODE_LINK_COORDINATOR_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/coordinator.pb.h"
#include "server/base/grpc_server.h"

namespace starling {
namespace node {

struct CoordinatorLinkOptions {
  // Required: the coordinator's gRPC address, "host:port" (the daemon's
  // --coordinator flag).
  std::string coordinator;
  // Required: the job to join (must match the coordinator's).
  std::string job_id;
  // How the coordinator names this node. Required: hostname and the
  // data-plane address "host:port" peers connect to. admin_address may be
  // empty (no admin service).
  std::string hostname;
  std::string data_address;
  std::string admin_address;
  // Workers that attach to this daemon (JoinRequest capabilities).
  int local_workers = 1;
  // The version the node runs; default: this build's.
  std::string version;
  // Bound on Join: reaching the coordinator and the group forming.
  absl::Duration join_timeout = absl::Seconds(60);
  // While the coordinator cannot be reached, the cause is logged at most
  // this often (the first failure at once).
  absl::Duration retry_log_interval = absl::Seconds(5);
  // Heartbeat period; zero: the coordinator's
  // JobConfig.heartbeat_interval_ms (1s if it sends none).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // Deadline of one heartbeat, Rejoin, EndRun or step report; zero: the
  // heartbeat period, at least 1s.
  absl::Duration rpc_timeout = absl::ZeroDuration();
  // The cluster secret (starling-node --cluster_secret_file), if any: every
  // call then carries a fresh member credential for it under the secret
  // (server/base/call_credential.h), which a coordinator started with the
  // same secret requires. Every call carries hostname and data_address.
  std::string cluster_secret;
  // TLS to the coordinator (--tls_ca_file to verify it; --tls_cert_file and
  // --tls_key_file: this node's client certificate); empty: in the clear.
  TlsFiles tls;
};

// Called on the link's thread with no lock held; they must not block.
struct CoordinatorLinkCallbacks {
  // Fills the node's live status into a heartbeat: iteration, shard and
  // optimizer-state bytes, workers, current run (run_id 0 while its workers
  // declare). The link sets job id, rank and group epoch. May be empty.
  std::function<void(proto::HeartbeatRequest*)> fill_status;
  // The coordinator reports these ranks LOST; called after every heartbeat
  // answer that lists some. May be empty.
  std::function<void(const std::vector<int>& lost_ranks)> on_lost_ranks;
  // A run failed on another rank (or the coordinator failed it for a lost
  // one): abort it if it still runs here. Called once per run id. May be
  // empty.
  std::function<void(const proto::RunFailure& failure)> on_run_failed;
  // The coordinator re-formed the group: `group` is this node's place in
  // the new epoch (rank, peers, shard map, key). From then on the link
  // speaks for that rank and epoch. May be called on any thread that made
  // a call to the coordinator (not only the link's). May be empty.
  std::function<void(const proto::JoinResponse& group)> on_regroup;
};

class CoordinatorLink {
 public:
  // Checks the options and creates the channel; contacts nobody.
  // InvalidArgument naming the flag and the value for a malformed
  // coordinator address ("--coordinator=127.0.0.1:99999: ..."), or a
  // missing job id, hostname or data address.
  static absl::StatusOr<std::unique_ptr<CoordinatorLink>> Create(
      CoordinatorLinkOptions options, CoordinatorLinkCallbacks callbacks);

  // Stop().
  ~CoordinatorLink();
  CoordinatorLink(const CoordinatorLink&) = delete;
  CoordinatorLink& operator=(const CoordinatorLink&) = delete;

  // Joins the job: retries while the coordinator is unreachable (logging
  // the cause every retry_log_interval), waits for the group to form, and
  // on success starts heartbeating at once. Errors:
  //   Unavailable         the coordinator could not be reached within
  //                       join_timeout (names the address and last cause)
  //   DeadlineExceeded    the group did not form in time (the coordinator's
  //                       count of joined nodes)
  //   FailedPrecondition / InvalidArgument  refused by the coordinator
  //   Cancelled           Stop() was called
  // REQUIRES: no successful Join() before.
  absl::StatusOr<proto::JoinResponse> Join();

  // Asks to begin the next run once this daemon's workers all ended their
  // declarations: `tensors` is their table (declaration order), or
  // `local_error` says why they disagree (then `tensors` is ignored);
  // `next_op_seq` the communicator's next op sequence number. Blocks until
  // every member asked (same answer for all) or `deadline`. Retries while
  // the coordinator is unreachable or restarting (re-registering first).
  // Errors: the coordinator's (InvalidArgument: tables differ, naming the
  // tensor, both declarations and both ranks; Unavailable: ranks LOST;
  // DeadlineExceeded: naming the ranks that have not ended their
  // declarations); DeadlineExceeded naming the coordinator when it could
  // not be reached in time; Cancelled after Stop();
  // FailedPrecondition before Join().
  // `initial_crc32c`: as RunRendezvous::BeginRun's.
  absl::StatusOr<proto::BeginRunResponse> BeginRun(
      const std::vector<proto::TensorSpec>& tensors,
      const std::string& local_error, std::optional<uint32_t> initial_crc32c,
      int local_workers, uint64_t next_op_seq, absl::Time deadline);

  // The coordinator's schedule for this node's rank from `next_iteration`
  // (GetSchedule: up to K iterations, with partitions_per_epoch). Blocks
  // until answered or `deadline`; retries while the coordinator is
  // unreachable or restarting (re-registering first), like BeginRun.
  // Errors, each naming the coordinator's address: the coordinator's
  // refusal (e.g. Unavailable: this rank is LOST); DeadlineExceeded when
  // it could not be reached in time (with the last cause); Cancelled after
  // Stop(); FailedPrecondition before Join().
  absl::StatusOr<proto::Schedule> GetSchedule(uint64_t next_iteration,
                                              absl::Time deadline);

  // Queues the end of a run on this node (run.state FINISHED or FAILED,
  // with run.steps, and run.error when failed; `failed_step` -1 when
  // unknown); sent by the link's thread at once. Never blocks.
  // `group_epoch`: the group the run was of (0: the current one); a run of
  // a group re-formed since is not reported (the coordinator failed it).
  void EndRun(const proto::RunStatus& run, int64_t failed_step = -1,
              uint64_t group_epoch = 0);

  // Queues a failed step's report (ReportStep with the error); sent by the
  // link's thread at once. Never blocks.
  void ReportStepFailure(int64_t step, const std::string& error);

  // The peer at `data_address` vanished from this node's data plane (its
  // connections ended under it): told to the coordinator in a heartbeat
  // sent at once (HeartbeatRequest.peers_vanished), as its rank in the
  // group the link is in when it beats: a peer lost while the group
  // re-forms (its old plane saw it go) is named in the new epoch. Ignored
  // for an address not in that group (or this node's). Never blocks.
  void ReportVanishedPeer(const std::string& data_address);

  // Stops heartbeating (after one last try at the queued reports, within
  // rpc_timeout) and cancels a Join or BeginRun in flight. Idempotent.
  void Stop();

  // The last answer to Join (or Rejoin); empty before Join().
  proto::JoinResponse join_response() const;
  // Its group epoch (0 before Join()).
  uint64_t group_epoch() const;
  // Heartbeats the coordinator accepted, and re-registrations done.
  int64_t heartbeats() const;
  int64_t rejoins() const;
  // Waits until heartbeats() >= count, or `deadline`; whether it did.
  bool AwaitHeartbeats(int64_t count, absl::Time deadline) const;

 private:
  // A report waiting to be sent: exactly one of the two is set. Of the
  // group epoch it was made in: dropped if the group re-formed since (the
  // coordinator failed that run at the re-formation).
  struct Outgoing {
    std::optional<proto::StepReport> step;
    std::optional<proto::EndRunRequest> end;
    uint64_t group_epoch = 0;
  };
  // How a call ended.
  enum class Outcome {
    kOk,
    // Unreachable, restarting, or the answer was lost: try again.
    kRetry,
    // The coordinator does not know this node's group: re-register.
    kRejoin,
    // Refused for good.
    kFailed,
    // Cancelled by Stop(), or not made because the link is stopping.
    kStopping,
  };
  struct CallResult {
    grpc::Status status;
    Outcome outcome = Outcome::kFailed;
  };

  CoordinatorLink(CoordinatorLinkOptions options,
                  CoordinatorLinkCallbacks callbacks,
                  std::shared_ptr<grpc::Channel> channel);

  // Calls `rpc` with a fresh context bounded by `deadline`; a
  // `cancellable` call is cancelled by Stop() (and not made once stopping).
  // `method` is the call's name, which its credential covers.
  CallResult Call(absl::string_view method, absl::Time deadline,
                  const std::function<grpc::Status(grpc::ClientContext*)>& rpc,
                  bool cancellable = true);
  static Outcome Classify(const grpc::Status& status,
                          const grpc::ClientContext& context);
  // Waits until `wake` or Stop(); false if stopping.
  bool PauseUntil(absl::Time wake);
  // Calls `rpc` (bounded by `deadline`) until the coordinator answers or
  // refuses for good: retries with backoff while it is unreachable or
  // restarting, re-registering when it does not know this node, and logs
  // `doing` at most every retry_log_interval. Returns the last call, whose
  // outcome is kOk, kFailed or kStopping; past the deadline,
  // DeadlineExceeded "the coordinator at ADDR did not answer `what` within
  // T: last cause".
  absl::StatusOr<CallResult> CallRetrying(
      absl::string_view method, absl::Time deadline, absl::string_view what,
      absl::string_view doing,
      const std::function<grpc::Status(grpc::ClientContext*)>& rpc);
  void Enqueue(Outgoing item);
  // A call begun in group epoch `epoch` that must not go on: the group
  // re-formed since, or this node was dropped (Unavailable naming the
  // epochs and `what`, as kFailed); nullopt while the epoch holds.
  std::optional<CallResult> Regrouped(uint64_t epoch, absl::string_view what);

  void HeartbeatLoop();
  void Beat();
  // Sends `items` in order; returns those still to send (retry later).
  // `final_deadline`: the last try at stopping (every call bounded by it,
  // not cancellable); absl::Time() otherwise.
  std::deque<Outgoing> Send(std::deque<Outgoing> items,
                            absl::Time final_deadline);
  // Re-registers with the coordinator; OK or why not. A re-formed group's
  // answer is adopted (on_regroup); a refusal for good (the group re-formed
  // without this node) makes the link's thread join afresh.
  absl::Status Rejoin();
  // Asks to join until the coordinator answers, `timeout` passes (the
  // coordinator's own DeadlineExceeded, or Unavailable naming the last
  // cause) or the link stops (Cancelled); `what` in messages. A join the
  // coordinator held while the running group's run went on (it takes nodes
  // in between runs) is asked again, with a fresh `timeout`, as long as
  // that lasts (logged every retry_log_interval).
  absl::StatusOr<proto::JoinResponse> AskToJoin(absl::Duration timeout,
                                                const std::string& what);
  // The link's thread: a node dropped from the group joins afresh, as long
  // as it takes (each attempt bounded by join_timeout), then regroups.
  void JoinAfresh();
  // Takes the member key `response` carries, if any.
  void KeepMemberKey(const proto::JoinResponse& response)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Adopts `group` (a re-formation's answer) and tells on_regroup.
  void Regroup(const proto::JoinResponse& group, absl::string_view how);
  void NoteRunId(uint64_t run_id);
  // Logs that `what` failed because of `status`, at most every
  // retry_log_interval per `last` (guarded by mu_).
  void LogRetry(absl::Time* last, absl::string_view what,
                const grpc::Status& status);

  const CoordinatorLinkOptions options_;
  const CoordinatorLinkCallbacks callbacks_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<proto::Coordinator::Stub> stub_;
  // This node as its Join describes it.
  proto::JoinRequest identity_;
  // Set by Join (under mu_) before joined_; read-only afterwards.
  absl::Duration period_;
  absl::Duration rpc_timeout_;

  mutable absl::Mutex mu_;
  // Signalled on Stop(), a queued report, and each accepted heartbeat.
  mutable absl::CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool joined_ ABSL_GUARDED_BY(mu_) = false;
  proto::JoinResponse join_ ABSL_GUARDED_BY(mu_);
  // The key the coordinator gave this member (JoinResponse.member_key):
  // every call but Join and Rejoin is signed under it, not under the
  // shared secret. Empty: none given (no cluster secret).
  std::string member_key_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> queue_ ABSL_GUARDED_BY(mu_);
  // Earliest time to retry the queue after a failed send.
  absl::Time retry_queue_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool rejoin_needed_ ABSL_GUARDED_BY(mu_) = false;
  // The coordinator refused this node's re-registration for good: the
  // link's thread joins afresh.
  bool join_afresh_needed_ ABSL_GUARDED_BY(mu_) = false;
  // Peers to report vanished in the next heartbeat, which is due at once.
  std::set<std::string> vanished_ ABSL_GUARDED_BY(mu_);  // data addresses
  bool beat_now_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t highest_run_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The run the last heartbeat reported (fill_status), for Rejoin.
  proto::RunStatus last_run_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rejoins_ ABSL_GUARDED_BY(mu_) = 0;
  bool beat_failing_ ABSL_GUARDED_BY(mu_) = false;
  // When each kind of failure was last logged.
  absl::Time last_beat_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_send_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_rejoin_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Run ids already given to on_run_failed. Confined to the link thread.
  std::set<uint64_t> told_failures_;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_LINK_COORDINATOR_LINK_H_
