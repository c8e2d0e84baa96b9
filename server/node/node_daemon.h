// NodeDaemon: one machine's Starling daemon (DESIGN.md "The three
// processes"), a long-running service. Start() binds the worker socket and
// the data port first (a clash fails before the group forms), joins the
// coordinator (rank, peers, config), starts heartbeating, opens the data
// plane of its group and serves local workers on the unix socket.
//
// The data plane (Plane) is one group epoch's: the TCP transport and a
// Communicator to the peers, the RunManager (runs, one after another;
// worker slots; rounds) and the engine of the job's mode its pushes and
// pulls go to (SyncEngine: the synchronous step; PsEngine: the shard
// owners). Each run's shard and optimizer state exist from its start to
// its end. When the coordinator re-forms the group (a member lost, a node
// taken in; proto/coordinator.proto), the daemon replaces its plane whole:
// the old group's run ends with an error naming the new epoch, the old
// plane stops, and a new one is built for this daemon's rank in the new
// group (on the regroup thread; the data port stays bound throughout);
// workers attached to the old plane are refused (their rank and group size
// changed) until they reconnect, and workers that attach meanwhile wait for
// the new plane.
//
// Threads:
//   - the TCP transport's event loop(s) (server/transport/tcp);
//   - the step thread (RunManager): every round's collective and the
//     synchronous step's optimizer updates (SyncEngine), the begin
//     (BeginRun RPC) and end of each run;
//   - the RunManager's abort listener (peers' run-failure notices);
//   - the worker socket's accept thread, plus a reader and a writer thread
//     per attached worker (parse requests, run pulls and parameter-server
//     pushes/pulls for that worker, and its schedule requests, which may
//     wait for a GetSchedule RPC; send its replies);
//   - the shard owners' modes: one server thread per peer (PsEngine);
//   - the coordinator link's thread (CoordinatorLink, from the join on,
//     before the mesh forms): heartbeats (shard and optimizer-state bytes,
//     workers, the run), re-registration after a coordinator restart,
//     step reports and run ends; it aborts peers the coordinator reports
//     lost and runs it reports failed, and joins afresh when the group
//     re-formed without this node;
//   - the regroup thread: builds the plane of a re-formed group;
//   - the TCP transport's acceptor (handshakes, each on its own deadline);
//   - gRPC's threads for the NodeAdmin service (node_admin_service.h);
//   - main.cc's /metrics server thread, and main, which waits for a signal.
//
// Thread-safe.
#ifndef STARLING_SERVER_NODE_NODE_DAEMON_H_
#define STARLING_SERVER_NODE_NODE_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/coordinator.pb.h"
#include "proto/node_admin.pb.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/link/coordinator_link.h"
#include "server/node/node_options.h"
#include "server/node/ps/ps_engine.h"
#include "server/node/run/run_engine.h"
#include "server/node/run/run_manager.h"
#include "server/node/run/run_rendezvous.h"
#include "server/node/sync/sync_engine.h"
#include "server/node/telemetry/collective_monitor.h"
#include "server/node/telemetry/metered_transport.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_server.h"
#include "server/node/worker/worker_session.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

class NodeDaemon;

// Lets another thread (a signal watcher) stop a daemon while
// NodeDaemon::Start is still joining or forming its data plane: Cancel()
// stops it then (Start returns Cancelled), or at once if it comes before.
// Once Start returned it does nothing: stop the daemon itself. Thread-safe.
class StartCanceller {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class NodeDaemon;
  // False when Cancel() came first.
  bool Attach(NodeDaemon* daemon);
  void Detach();

  mutable absl::Mutex mu_;
  NodeDaemon* daemon_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class NodeDaemon : public WorkerRequestHandler {
 public:
  // Joins and starts serving. `registry` is borrowed and must outlive the
  // daemon. Errors, each one line:
  //   InvalidArgument   a malformed --coordinator (at once)
  //   Unavailable       the coordinator could not be reached within
  //                     join_timeout (names address, timeout and cause;
  //                     the cause is logged every few seconds meanwhile);
  //                     the data port or worker socket is taken
  //   DeadlineExceeded  the group did not form in time (the coordinator's
  //                     count of joined nodes)
  //   FailedPrecondition / InvalidArgument  refused by the coordinator, bad
  //                     options or job config (e.g. unknown optimizer)
  //   Cancelled         `canceller` (may be null) cancelled it meanwhile
  static absl::StatusOr<std::unique_ptr<NodeDaemon>> Start(
      const NodeOptions& options, metrics::MetricsRegistry* registry,
      StartCanceller* canceller = nullptr);

  // Stop().
  ~NodeDaemon() override;
  NodeDaemon(const NodeDaemon&) = delete;
  NodeDaemon& operator=(const NodeDaemon&) = delete;

  // Stops serving workers, the engines and the heartbeat. Idempotent.
  void Stop();

  // This daemon's rank and group now (the group of its current plane).
  int rank() const { return group().rank(); }
  proto::JoinResponse group() const;

  // For the NodeAdmin service.
  proto::NodeStatusReply Status() const;
  proto::ListShardsReply Shards() const;
  proto::GroupReply Group() const;
  // The collectives in flight and the last ones that ended.
  proto::CollectivesReply Collectives() const;

  // WorkerRequestHandler (worker reader threads).
  absl::StatusOr<proto::HelloReply> Attach(
      const WorkerHandle& worker, const proto::HelloRequest& hello) override;
  void Handle(const WorkerHandle& worker,
              const proto::WorkerRequest& request) override;
  void Detach(const WorkerHandle& worker) override;

 private:
  // Start without the canceller's last word (Start adds it).
  static absl::StatusOr<std::unique_ptr<NodeDaemon>> StartUncancelled(
      const NodeOptions& options, metrics::MetricsRegistry* registry,
      StartCanceller* canceller);

  // One group epoch's data plane (see above). Built whole, then constant;
  // shared by the threads that use it, stopped when replaced.
  struct Plane : public RunRendezvous {
    explicit Plane(NodeDaemon* daemon) : daemon(daemon) {}
    ~Plane() override;
    // Fails the running run with `why`, wakes every waiting request and
    // joins the plane's threads. Idempotent.
    void Stop(const absl::Status& why);
    // RunRendezvous: this plane's runs, begun and ended in its epoch.
    absl::StatusOr<Begun> BeginRun(
        const std::vector<proto::TensorSpec>& tensors,
        const std::string& local_error, std::optional<uint32_t> initial_crc32c,
        int local_workers, uint64_t next_op_seq, absl::Time deadline) override;
    void EndRun(const proto::RunStatus& run) override;

    NodeDaemon* const daemon;
    proto::JoinResponse group;
    std::string self;  // "rank 2 (127.0.0.1:29502)"
    std::unique_ptr<MeteredTransport> transport;
    // How the writes to each peer travel, by rank ("" for this rank):
    // "tcp", or the fabric path's name ("fabric (verbs;ofi_rxm)").
    std::vector<std::string> peer_transports;
    std::unique_ptr<collective::Communicator> comm;
    // Each calls the other; both are stopped before either goes.
    std::unique_ptr<RunManager> runs;
    std::unique_ptr<RunEngine> engine;
    // transport->stale_writes_dropped() already added to the metric.
    // Confined to the coordinator link's thread (FillHeartbeat).
    uint64_t stale_writes_reported = 0;
    absl::Mutex stop_mu;
    bool stopped ABSL_GUARDED_BY(stop_mu) = false;
  };

  NodeDaemon(NodeOptions options, NodeMetrics metrics,
             std::shared_ptr<CollectiveMonitor> collectives);
  absl::Status Listen();
  absl::Status Join();
  // The plane of `group` (connected to its peers within
  // `connect_timeout`), started.
  absl::StatusOr<std::shared_ptr<Plane>> OpenDataPlane(
      const proto::JoinResponse& group, absl::Duration connect_timeout);
  // Puts the fabric under `tcp` where --transport allows and both ends have
  // it (every rank of the group runs this), logs each peer's transport and
  // why, and returns each peer's transport name by rank.
  absl::StatusOr<std::vector<std::string>> ChooseTransports(
      transport::tcp::TcpTransport* tcp, absl::Time deadline);
  // The plane now; null before the first and while a re-formed group's is
  // being built.
  std::shared_ptr<Plane> plane() const;
  // The coordinator link told of a re-formed group (any thread): queued for
  // the regroup thread.
  void OnRegroup(const proto::JoinResponse& group);
  void RegroupLoop();
  absl::Status Regroup(const proto::JoinResponse& group);
  // The request's worker gets `why` (no plane to serve it).
  static void Refuse(const WorkerHandle& worker,
                     const proto::WorkerRequest& request,
                     const absl::Status& why);
  absl::Status NoPlane() const;
  // CoordinatorLink callbacks (the link's thread).
  void FillHeartbeat(proto::HeartbeatRequest* request);
  void OnLostRanks(const std::vector<int>& lost_ranks);
  void OnRunFailed(const proto::RunFailure& failure);
  // A plane of epoch `epoch` (this daemon rank `rank` of `size` in it)
  // stopped a run that may go on in a re-formed group (RunManager
  // SetSuspendedHandler): kept until the group re-forms (carried or not),
  // the coordinator fails it, or CarryPendingLocked's bound passes.
  void OnRunSuspended(std::shared_ptr<Run> run, uint64_t epoch, int rank,
                      int size);
  // Why forming the data plane of group `epoch` should stop (a later
  // group came, the daemon stops), if it should.
  std::optional<std::string> ReasonToStopForming(uint64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A later group (or a stop: `reason`, ReasonToStopForming's) replaces
  // `plane` while its run's state moves: fails the move's collectives at
  // once (Cancelled, with the reason).
  void AbortStateMove(Plane& plane, const std::string& reason)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The plane of `group` serves (served_epoch_ and the rest).
  void NoteServedLocked(const proto::JoinResponse& group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A suspended run waits for its group's decision (workers that
  // reconnect wait for it too); drops it past the bound.
  bool CarryPendingLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How long a suspended run waits for its group (the job's heartbeat
  // timeout and rejoin grace).
  absl::Duration CarryBound() const;
  void OnStep(int64_t step, const absl::Status& status);
  // A worker's schedule request (its reader thread): the coordinator's
  // schedule for this rank from the asked iteration, from the cache or one
  // GetSchedule RPC shared by every local worker asking for it.
  void AnswerSchedule(const WorkerHandle& worker,
                      const proto::WorkerRequest& request);
  absl::StatusOr<proto::Schedule> ScheduleFrom(uint64_t next_iteration);
  // "rank 2 (127.0.0.1:29502)", of the plane now.
  std::string Self() const;
  std::string SelfAt(int rank) const;

  // A run that may go on in the re-formed group (OnRunSuspended): this
  // daemon's state of it and place in the group of `epoch`.
  struct Carry {
    CarriedRun carried;
    uint64_t epoch = 0;
    absl::Time since;
  };

  // One schedule asked of the coordinator: pending until `done`.
  struct CachedSchedule {
    bool done = false;
    absl::StatusOr<proto::Schedule> result;
  };

  const NodeOptions options_;
  NodeMetrics metrics_;
  const std::shared_ptr<CollectiveMonitor> collectives_;
  // Bytes of the attached workers' pools (the daemon maps them).
  std::atomic<uint64_t> pool_bytes_{0};
  std::unique_ptr<CoordinatorLink> link_;
  // The job (the same in every group epoch); set by Start(), then constant.
  proto::JobConfig config_;
  // Bound before joining, for the daemon's life; each plane's transport
  // listens on a duplicate of it.
  transport::tcp::ScopedFd data_listen_fd_;
  // The transport's traffic counters, registered once for every plane.
  MeteredTransport::Counters traffic_;
  std::unique_ptr<WorkerServer> worker_server_;
  std::thread regroup_thread_;
  // Writes the sync runs' durable checkpoints (JobConfig.checkpoint_*) for
  // every plane: what a plane submitted is written even after it stopped.
  std::unique_ptr<CheckpointWriter> checkpoints_;

  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<Plane> plane_ ABSL_GUARDED_BY(mu_);
  // The group of the last plane built or being built (its epoch orders
  // re-formations) and the next one to build.
  proto::JoinResponse group_ ABSL_GUARDED_BY(mu_);
  std::optional<proto::JoinResponse> next_group_ ABSL_GUARDED_BY(mu_);
  // The plane whose run's state is moving (Regroup, ContinueRun), or null:
  // a later group aborts it at once (OnRegroup) instead of letting a state
  // move that no one will use finish first.
  std::shared_ptr<Plane> forming_ ABSL_GUARDED_BY(mu_);
  // The run a stopped plane handed over, until the group decides.
  std::optional<Carry> carry_ ABSL_GUARDED_BY(mu_);
  // The epoch, rank and size of the last data plane that served (group_
  // may be a later one whose plane never formed): a carried run's state
  // is of that plane's group.
  uint64_t served_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int served_rank_ ABSL_GUARDED_BY(mu_) = -1;
  int served_size_ ABSL_GUARDED_BY(mu_) = 0;
  // Attached workers: session -> the group epoch of the plane they
  // attached to (their rank and group size are that group's).
  std::map<uint64_t, uint64_t> attached_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);

  // The last few schedules by next_iteration, oldest first: every local
  // worker asks for the same iterations. Never held across the RPC.
  absl::Mutex schedules_mu_;
  std::deque<std::pair<uint64_t, std::shared_ptr<CachedSchedule>>> schedules_
      ABSL_GUARDED_BY(schedules_mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_NODE_DAEMON_H_
