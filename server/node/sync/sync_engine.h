// SyncEngine: the daemon's step thread, the runs it serves one after the
// other, and the local worker slots.
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
// before, so that late frames of an earlier run never match). The run's
// memory is allocated then. It ends with the finish round (every worker
// called Finish, then a barrier across daemons), or fails: a failed step,
// a missing worker past the grace, a peer's or the coordinator's report.
// A failure cancels the collective in flight, fails every queued round and
// later request of the run with the run's error, is reported to the
// coordinator and sent to every peer (control tag kRunAbortTag), and
// releases the run's memory once its last user let go. New declarations
// then start the next run on the same processes.
//
// Rounds. A round is one collective request from every local worker: the
// commit, a push of step s (sync modes), a worker all-reduce, a barrier,
// or the finish. Each slot's requests queue in arrival order; once every
// slot has one queued, the step thread takes the head of each, checks they
// are the same request, runs it and answers every worker.
//
// The synchronous step (DESIGN.md "One synchronous step"), for push round
// s: the local reduce, reduce-scatter, optimizer and all-gather
// (StepDataPath::ApplyStep), then version s + 1 is published and pulls
// waiting for it copy it out (StepDataPath::CopyParameters).
// The parameters live in a sealed memfd (ShardStore) whose header page the
// step marks "writing s + 1" before the optimizer and "version s + 1" after
// the all-gather; in sync modes each committed worker gets the descriptor
// with its commit reply and may read them in place, read-only (client
// ParametersView: no copy). While a step writes the parameters no pull
// reads them (`updating_`, `readers_`). Copies in user space are
// StepDataPath's; NodeMetrics::*_copied_bytes count them.
//
// Deadlines: a collective waits at most `timeout` + `grace` (a peer may be
// holding the step for its missing worker); a pull as long for its
// version; the commit `timeout` for the other daemons' workers.
//
// Failure notices to and from the peers: RunAbortNotices (kRunAbortTag).
// Ended runs: RunHistory.
//
// Thread-safe. Threads: the step thread and the abort listener
// (Start/Stop); callers' threads (workers' reader threads, the heartbeat)
// for everything else. One mutex, `mu_`, guards the slots, the running run,
// its version and the history (WorkerSlots and RunHistory are
// thread-compatible, held under it); DeclaredTensors' own lock is taken
// under it, never the reverse. Replies are queued, never written, under the
// lock; no collective, send or rendezvous runs under it.
#ifndef STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_
#define STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
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
#include "server/collective/communicator.h"
#include "server/node/run/declared_tensors.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/run/run_abort_notices.h"
#include "server/node/run/run_history.h"
#include "server/node/run/worker_slots.h"
#include "server/node/sync/step_data_path.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_session.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

// How a daemon begins and ends runs with the rest of its group: the
// coordinator's BeginRun / EndRun in the daemon, a fake in tests.
// Implementations are thread-safe.
class RunRendezvous {
 public:
  struct Begun {
    uint64_t run_id = 0;
    uint64_t first_op_seq = 0;
    int total_workers = 0;
  };
  virtual ~RunRendezvous() = default;
  // Blocks until every daemon of the group began (all answered alike), or
  // fails (mismatched tables: InvalidArgument naming both; `local_error`
  // of some daemon; DeadlineExceeded naming the daemons that did not).
  virtual absl::StatusOr<Begun> BeginRun(
      const std::vector<proto::TensorSpec>& tensors,
      const std::string& local_error, int local_workers, uint64_t next_op_seq,
      absl::Time deadline) = 0;
  // Reports a run's end; never blocks.
  virtual void EndRun(const proto::RunStatus& run) = 0;
};

struct SyncEngineOptions {
  // Workers of this daemon; rounds wait for all of them.
  int local_workers = 1;
  // False in parameter-server mode: pushes go to PsEngine, not rounds.
  bool pushes_are_rounds = true;
  // Per collective; the commit waits this long for the other daemons.
  absl::Duration timeout = absl::Seconds(30);
  // How long a missing worker's slot holds its run.
  absl::Duration grace = absl::Seconds(60);
  // The run's optimizer, for its shard (shard::CreateOptimizer names);
  // "none": plain all-reduce jobs, the shard is never updated.
  std::string optimizer = "sgd";
  float learning_rate = 0.01f;
  // Async SGD's staleness bound s (0: synchronous): a pull for step t
  // waits for version t - s, and returns the newest version held.
  int staleness = 0;
  // Runs kept in recent_runs().
  int history = 8;
  // "rank 2 (127.0.0.1:29502)": this daemon in messages.
  std::string self;
};

class SyncEngine {
 public:
  // `comm`, `transport`, `metrics` and `rendezvous` are borrowed and must
  // outlive the engine. `on_step` (may be null) runs on the step thread
  // after each push round, with its status.
  SyncEngine(SyncEngineOptions options, collective::Communicator* comm,
             transport::Transport* transport, NodeMetrics* metrics,
             RunRendezvous* rendezvous,
             std::function<void(int64_t, const absl::Status&)> on_step);
  ~SyncEngine();
  SyncEngine(const SyncEngine&) = delete;
  SyncEngine& operator=(const SyncEngine&) = delete;

  void Start();
  // Fails queued rounds with Unavailable and joins the threads. Idempotent
  // (the destructor calls it again); call from one thread at a time.
  void Stop();

  // A worker attached: fills the HelloReply's run fields (run_id,
  // next_step, grace_ms). AlreadyExists when the index is taken;
  // FailedPrecondition when it finished a run that is still running.
  absl::Status Attach(const WorkerHandle& worker, proto::HelloReply* reply);
  // The worker's connection closed.
  void Detach(const WorkerHandle& worker);
  // Declare (answers the worker).
  void Declare(const WorkerHandle& worker, const proto::WorkerRequest& request);
  // Queues a commit, push (if pushes are rounds), all-reduce, barrier or
  // finish; answers the worker when its round ran.
  void Submit(const WorkerHandle& worker, const proto::WorkerRequest& request);
  // Answers a pull (sync modes): waits for the version, copies.
  void Pull(const WorkerHandle& worker, const proto::WorkerRequest& request);

  // Fails run `run_id` (0: whichever runs now) with `why`, as reported by a
  // peer or the coordinator; not sent on to the peers. No-op if that run
  // is not running.
  void AbortRun(uint64_t run_id, const absl::Status& why);

  // The running run, or null.
  std::shared_ptr<Run> current_run() const;
  // The run `worker` takes part in, if it is running; otherwise the error
  // its requests get (the run failed, finished, or has not begun).
  absl::StatusOr<std::shared_ptr<Run>> RunOf(const WorkerHandle& worker) const;

  // For status and heartbeats.
  proto::RunStatus run_status() const;
  std::vector<proto::RunStatus> recent_runs() const;
  std::vector<proto::WorkerStatus> workers() const;
  int attached_workers() const;
  // What each local worker has queued for the next round, and the last
  // round run (for "who is missing": a daemon outside the group's
  // collective waits for one of these).
  proto::LocalRounds LocalRounds(absl::Time now) const;

 private:
  // Replies and notices gathered under the lock, sent after it.
  struct Deferred {
    WorkerSlots::Replies replies;
    bool broadcast = false;
    proto::RunAbort abort;
    std::vector<proto::RunStatus> ended;
  };

  void Loop();
  void Flush(Deferred& deferred);
  // Fails the running run `run_id` with `why`; Internal to the lock.
  void FailRunLocked(uint64_t run_id, const absl::Status& why, bool broadcast,
                     Deferred* deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordEndLocked(const proto::RunStatus& status, Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Steps applied (sync modes) or updates of the shard (parameter server).
  int64_t StepsLocked(Run& run) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the run if a missing slot's grace passed; returns the earliest
  // time one will.
  absl::Time CheckGraceLocked(Deferred* deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status Execute(std::vector<Round>& rounds,
                       const std::shared_ptr<Run>& run,
                       proto::WorkerResponse* reply, bool* applied);
  absl::Status Commit(std::vector<Round>& rounds, proto::WorkerResponse* reply);
  // One bucket of a push round; `applied` says whether it was the step's
  // last (the parameters moved to the next version).
  absl::Status Step(std::vector<Round>& rounds, Run& run, bool* applied);
  // The workers' ReportStepTimes carried by a push round.
  void RecordStepTimes(const std::vector<Round>& rounds, Run& run);
  absl::Status Finish(Run& run);
  collective::CallOptions Call(Run& run) const;
  std::string Describe(const proto::WorkerRequest& request) const;
  // Unavailable: this daemon is stopping.
  absl::Status ShuttingDown() const;

  const SyncEngineOptions options_;
  collective::Communicator* const comm_;
  transport::Transport* const transport_;
  NodeMetrics* const metrics_;
  RunRendezvous* const rendezvous_;
  const std::function<void(int64_t, const absl::Status&)> on_step_;
  DeclaredTensors declared_;
  // ApplyStep and AllReduce on the step thread; CopyParameters in Pull.
  StepDataPath data_path_;
  RunAbortNotices notices_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  // Signalled when a queue, a slot or the run changes.
  absl::CondVar changed_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  WorkerSlots slots_ ABSL_GUARDED_BY(mu_);
  // The running run, or null.
  std::shared_ptr<Run> run_ ABSL_GUARDED_BY(mu_);
  int64_t applied_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool updating_ ABSL_GUARDED_BY(mu_) = false;
  int readers_ ABSL_GUARDED_BY(mu_) = 0;
  // Ended runs, newest last (at most options_.history).
  RunHistory history_ ABSL_GUARDED_BY(mu_);
  // The last round the step thread ran (its first request) and when it
  // ended (InfinitePast: none yet).
  proto::WorkerRequest last_round_ ABSL_GUARDED_BY(mu_);
  absl::Time last_round_end_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Step thread only: the bucket the running step expects next.
  int next_bucket_ = 0;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_
