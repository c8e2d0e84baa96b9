// RunManager: the daemon's runs, one after the other, and what every
// training mode shares: the local worker slots, their rounds, the commit
// and rendezvous, the run's lifecycle (begin, finish, fail, abort notices),
// the history of ended runs and the declared tensors. What a mode does with
// its pushes and pulls is its RunEngine's (run_engine.h).
//
// Slots (WorkerSlots). A daemon has `local_workers` slots, one per worker
// index. A slot is empty, attached (a connected worker), missing (its
// worker left a running run without finishing) or finished (its worker
// called Finish). A missing slot holds the run's rounds for `grace`: a new
// worker with the same index resumes in its place (the HelloReply tells it
// the run and the step its predecessor reached; it declares the run's
// tensors again, pulls and goes on, and since its predecessor's unconsumed
// requests were dropped, no update is lost or doubled). Past the grace the
// run fails on every rank naming the missing worker. A worker that attaches
// and leaves before its run began changes nothing.
//
// Runs. A run begins with the commit round (every local worker ended its
// declarations): the local declaration lists must agree, then the
// coordinator (RunRendezvous) agrees with every daemon on the run's number,
// the tables and the first collective sequence number (above any used
// before, so that late frames of an earlier run never match). The engine
// allocates the run's memory then (RunEngine::CreateRun) and the initial
// parameters are agreed (SharedRounds). It ends with the finish round
// (every worker called Finish, then a barrier across daemons), or fails: a
// failed round, a missing worker past the grace, a peer's or the
// coordinator's report. A failure cancels the collective in flight, fails
// every queued round and later request of the run with the run's error, is
// reported to the coordinator and sent to every peer (control tag
// kRunAbortTag), and releases the run's memory once its last user let go.
// New declarations then start the next run on the same processes.
//
// Rounds. A round is one collective request from every local worker: the
// commit, a push of step s (when the engine queues pushes as rounds:
// Submit), a worker all-reduce, a barrier, or the finish. Each slot's
// requests queue in arrival order; once every slot has one queued, the step
// thread takes the head of each, checks they are the same request, runs it
// (a push round: RunEngine::PushRound) and answers every worker.
//
// Deadlines: a collective waits at most `timeout` + `grace` (a peer may be
// holding the step for its missing worker); the commit `timeout` for the
// other daemons' workers.
//
// Thread-safe. Threads: the step thread and the abort listener
// (Start/Stop); callers' threads (workers' reader threads, the heartbeat)
// for everything else. One mutex, `mu_`, guards the slots, the running run
// and the history (WorkerSlots and RunHistory are thread-compatible, held
// under it); DeclaredTensors' own lock and the engine's are taken under it,
// never the reverse. Replies are queued, never written, under the lock; no
// collective, send or rendezvous runs under it.
#ifndef STARLING_SERVER_NODE_RUN_RUN_MANAGER_H_
#define STARLING_SERVER_NODE_RUN_RUN_MANAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/node_admin.pb.h"
#include "proto/worker.pb.h"
#include "server/base/scoped_fd.h"
#include "server/collective/communicator.h"
#include "server/node/run/declared_tensors.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/run/run_abort_notices.h"
#include "server/node/run/run_engine.h"
#include "server/node/run/run_history.h"
#include "server/node/run/run_rendezvous.h"
#include "server/node/run/shared_rounds.h"
#include "server/node/run/worker_slots.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_session.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

struct RunManagerOptions {
  // Workers of this daemon; rounds wait for all of them.
  int local_workers = 1;
  // Per collective; the commit waits this long for the other daemons.
  absl::Duration timeout = absl::Seconds(30);
  // How long a missing worker's slot holds its run.
  absl::Duration grace = absl::Seconds(60);
  // The run's optimizer, for its shard (shard::CreateOptimizer names);
  // "none": plain all-reduce jobs, the shard is never updated.
  std::string optimizer = "sgd";
  float learning_rate = 0.01f;
  // RunFactoryOptions::buddy_distance of every run (0: no replicas).
  int buddy_distance = 0;
  // Runs kept in recent_runs().
  int history = 8;
  // "rank 2 (127.0.0.1:29502)": this daemon in messages.
  std::string self;
};

class RunManager {
 public:
  // `comm`, `transport`, `metrics` and `rendezvous` are borrowed and must
  // outlive the manager. `on_step` (may be null) runs on the step thread
  // after each push round that applied a step or failed, with its status.
  RunManager(RunManagerOptions options, collective::Communicator* comm,
             transport::Transport* transport, NodeMetrics* metrics,
             RunRendezvous* rendezvous,
             std::function<void(int64_t, const absl::Status&)> on_step);
  ~RunManager();
  RunManager(const RunManager&) = delete;
  RunManager& operator=(const RunManager&) = delete;

  // Starts the step thread and the abort listener; runs are `engine`'s
  // (borrowed; it must outlive the manager's Stop).
  void Start(RunEngine* engine);
  // Fails the running run and queued rounds with `why` (OK: Unavailable,
  // "daemon ... is shutting down") and joins the threads. Idempotent (the
  // destructor calls it again); call from one thread at a time.
  void Stop(const absl::Status& why = absl::OkStatus());

  // A worker attached: fills the HelloReply's run fields (run_id,
  // next_step, grace_ms). AlreadyExists when the index is taken;
  // FailedPrecondition when it finished a run that is still running.
  absl::Status Attach(const WorkerHandle& worker, proto::HelloReply* reply);
  // The worker's connection closed.
  void Detach(const WorkerHandle& worker);
  // Declare (answers the worker).
  void Declare(const WorkerHandle& worker, const proto::WorkerRequest& request);
  // Queues a commit, push, all-reduce, barrier or finish; answers the
  // worker when its round ran.
  void Submit(const WorkerHandle& worker, const proto::WorkerRequest& request);

  // Called (outside the lock, on the thread that failed it) with a run that
  // failed for a peer's loss and may go on in a re-formed group
  // (RunEngine::MayContinue; reported to the coordinator as suspended).
  // Set before Start.
  void SetSuspendedHandler(
      std::function<void(std::shared_ptr<Run>, const absl::Status&)> handler) {
    on_suspended_ = std::move(handler);
  }
  // Carries `carried` on in this manager's group (RunEngine::ContinueRun,
  // on the calling thread; call before workers attach): the run becomes
  // the running run at the agreed step, every local slot missing until its
  // worker reconnects. On failure the error is returned; where it is a
  // peer's loss (RunEngine::MayContinue: a member lost while the state
  // moved) the run stays suspended, reported so, and `*still_suspended`
  // says the carried state may go on in the group after (nothing was
  // taken from it that a later plan would miss); otherwise the run is
  // recorded failed and reported.
  absl::Status ContinueRun(const CarriedRun& carried,
                           bool* still_suspended = nullptr);

  // Fails run `run_id` (0: whichever runs now) with `why`, as reported by a
  // peer or the coordinator; not sent on to the peers. No-op if that run
  // is not running.
  // `may_continue` false: the run cannot go on whatever the cause (the
  // coordinator failed it).
  void AbortRun(uint64_t run_id, const absl::Status& why,
                bool may_continue = true);

  // Fails run `run_id` with `why`, found by this daemon outside the step
  // thread (a shard owner that did not answer), and tells the peers, as a
  // failed step does. No-op if that run is not running.
  void FailRun(uint64_t run_id, const absl::Status& why);

  // The running run, or null.
  std::shared_ptr<Run> current_run() const;
  // The run `worker` takes part in, if it is running; otherwise the error
  // its requests get (replaced, not committed, or StaleRunError).
  absl::StatusOr<std::shared_ptr<Run>> RunOf(const WorkerHandle& worker) const;
  // The error a request of run `run_id` gets once it is not running.
  absl::Status StaleRunError(uint64_t run_id) const;
  // A pull of `worker` returned `version` (its slot remembers it: the
  // staleness of a push whose client did not say). No-op if replaced.
  void RecordPull(const WorkerHandle& worker, int64_t version);
  // The version worker `index`'s last pull returned (-1: none).
  int64_t LastPulledVersion(int index) const;

  // For status and heartbeats.
  proto::RunStatus run_status() const;
  std::vector<proto::RunStatus> recent_runs() const;
  std::vector<proto::WorkerStatus> workers() const;
  int attached_workers() const;
  // What each local worker has queued for the next round, and the last
  // round run (for "who is missing": a daemon outside the group's
  // collective waits for one of these).
  proto::LocalRounds LocalRounds(absl::Time now) const;

  // Every collective of a run: bounded by `timeout` + `grace`, cancelled
  // when the run fails.
  collective::CallOptions Call(Run& run) const;

 private:
  // Replies and notices gathered under the lock, sent after it.
  struct Deferred {
    WorkerSlots::Replies replies;
    bool broadcast = false;
    proto::RunAbort abort;
    std::vector<proto::RunStatus> ended;
    // A failed run that may go on (on_suspended_), and why it stopped.
    std::shared_ptr<Run> suspended;
    absl::Status suspended_why;
  };

  void Loop();
  // Takes the next ready round (empty when only deferred work was ready);
  // false once stopping.
  bool NextRound(std::vector<Round>* rounds, std::shared_ptr<Run>* run,
                 Deferred* deferred);
  // Answers a round's workers with `status` and `reply`.
  void Answer(std::vector<Round>& rounds, const absl::Status& status,
              const proto::WorkerResponse& reply);
  void Flush(Deferred& deferred);
  // Fails the running run `run_id` with `why`; Internal to the lock.
  // `may_continue`: false where the cause is not a peer's loss whatever
  // its code (a missing worker's grace).
  void FailRunLocked(uint64_t run_id, const absl::Status& why, bool broadcast,
                     Deferred* deferred, bool may_continue = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndRunLocked(const proto::RunStatus& status, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the run if a missing slot's grace passed; returns the earliest
  // time one will.
  absl::Time CheckGraceLocked(Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why `slot` may not queue `request` now (OK: answered at once with
  // success), or null when it may. Fills `answer` and `pass_fd` for a
  // resuming worker's commit.
  std::optional<absl::Status> RefuseLocked(WorkerSlots::Slot* slot,
                                           const proto::WorkerRequest& request,
                                           proto::WorkerResponse* answer,
                                           ScopedFd* pass_fd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status Execute(std::vector<Round>& rounds,
                       const std::shared_ptr<Run>& run,
                       proto::WorkerResponse* reply, bool* applied);
  absl::Status Commit(std::vector<Round>& rounds, proto::WorkerResponse* reply);
  // The commit's local table (buckets assigned) and supplier of initial
  // parameters (with the CRC32C of those its workers set as the run's, not
  // offered), or the local error the rendezvous carries to every daemon
  // (workers that set different ones, among others).
  std::vector<proto::TensorSpec> LocalTable(
      const std::vector<Round>& rounds, const Round** supplier,
      std::optional<uint32_t>* initial_crc32c, std::string* local_error);
  // The run begun with the group: its memory, version 0 of its parameters.
  // `*first_step`: where its workers begin (0, or the version of the
  // durable checkpoint of begun.resume_run_id it goes on from).
  absl::StatusOr<std::shared_ptr<Run>> BeginRun(
      const std::vector<proto::TensorSpec>& tensors,
      const RunRendezvous::Begun& begun, const Round* supplier,
      int64_t* first_step);
  absl::Status Finish(Run& run);
  // A run of this daemon's group: its id, workers and the job's optimizer.
  RunFactoryOptions RunOptions(uint64_t run_id, int total_workers) const;
  std::string Describe(const proto::WorkerRequest& request) const;
  // Unavailable: this daemon is stopping.
  absl::Status ShuttingDown() const;

  const RunManagerOptions options_;
  collective::Communicator* const comm_;
  transport::Transport* const transport_;
  NodeMetrics* const metrics_;
  RunRendezvous* const rendezvous_;
  const std::function<void(int64_t, const absl::Status&)> on_step_;
  std::function<void(std::shared_ptr<Run>, const absl::Status&)> on_suspended_;
  RunEngine* engine_ = nullptr;  // set by Start, before the threads
  DeclaredTensors declared_;
  // All-reduce rounds and initial parameters, on the step thread.
  SharedRounds shared_;
  RunAbortNotices notices_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  // Signalled when a queue, a slot or the run changes.
  absl::CondVar changed_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  WorkerSlots slots_ ABSL_GUARDED_BY(mu_);
  // The running run, or null.
  std::shared_ptr<Run> run_ ABSL_GUARDED_BY(mu_);
  // Ended runs, newest last (at most options_.history).
  RunHistory history_ ABSL_GUARDED_BY(mu_);
  // The last round the step thread ran (its first request) and when it
  // ended (InfinitePast: none yet).
  proto::WorkerRequest last_round_ ABSL_GUARDED_BY(mu_);
  absl::Time last_round_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_MANAGER_H_
