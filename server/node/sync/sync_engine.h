// SyncEngine: the synchronous step (DESIGN.md "One synchronous step"), the
// RunEngine of sync SGD, sync EASGD and async SGD's bounded staleness. Its
// runs are SyncRuns (sync_run.h: buckets, master shard, wire type).
//
// A push is a round: Push queues it in the worker's slot (RunManager), and
// once every local worker pushed bucket b of step s the manager's step
// thread runs PushRound: the local reduce and reduce-scatter of the bucket,
// and after the step's last bucket the optimizer and all-gather
// (StepDataPath), then version s + 1 is published and pulls waiting for it
// copy it out (StepDataPath::CopyParameters).
//
// The parameters live in a sealed memfd (ShardStore) whose header page the
// step marks "writing s + 1" before the optimizer and "version s + 1" after
// the all-gather; each committed worker gets the descriptor with its commit
// reply and may read them in place, read-only (client ParametersView: no
// copy). While a step writes the parameters no pull reads them
// (`updating_`, `readers_`). Copies in user space are StepDataPath's;
// NodeMetrics::*_copied_bytes count them.
//
// Deadlines: a pull waits for its version at most `timeout` + `grace` (a
// peer may hold the step for its missing worker); a step waits for the
// pulls copying out the last version at most `timeout` (they copy memory,
// no I/O: the bound is against our own bug).
//
// Thread-safe. PushRound, ParametersReady and everything StepDataPath does
// but CopyParameters run on the manager's step thread; Push and Pull on the
// workers' reader threads. One mutex, `mu_`, guards the running run's
// version and its readers; it is taken under the manager's lock (RunBegan,
// RunEnded, Steps), never the reverse: no call into the manager holds it.
#ifndef STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_
#define STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/run/run_engine.h"
#include "server/node/run/run_factory.h"
#include "server/node/run/run_manager.h"
#include "server/node/sync/checkpoint.h"
#include "server/node/sync/step_data_path.h"
#include "server/node/sync/sync_run.h"
#include "server/node/telemetry/node_metrics.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

struct SyncEngineOptions {
  // Per collective (the step's wait for readers too).
  absl::Duration timeout = absl::Seconds(30);
  // How long a missing worker's slot holds its run: a pull waits `timeout`
  // + `grace` for its version.
  absl::Duration grace = absl::Seconds(60);
  // Async SGD's staleness bound s (0: synchronous): a pull for step t
  // waits for version t - s, and returns the newest version held.
  int staleness = 0;
  // "rank 2 (127.0.0.1:29502)": this daemon in messages.
  std::string self;
  // Durable checkpoints (checkpoint.h): every `checkpoint_every_steps`
  // committed steps (0: none), and at the first committed step at least
  // `checkpoint_interval` (zero: none) after the last checkpoint by any
  // daemon's clock (a vote on every step: the replicas' barrier becomes a
  // one-float all-reduce, or without replicas one is added), this
  // daemon's master shard and optimizer
  // state go to `checkpoints` (borrowed, outlives the engine; null: none),
  // under `checkpoint_root` (JobConfig.checkpoint_dir), as written by
  // group epoch `group_epoch`; a run that goes on reads them back when a
  // lost shard has no replica left. `optimizer`: the job's (a run of
  // "none" goes on after a loss without replicas: MayContinue).
  CheckpointWriter* checkpoints = nullptr;
  std::string checkpoint_root;
  int checkpoint_every_steps = 0;
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  uint64_t group_epoch = 0;
  std::string optimizer;
};

class SyncEngine : public RunEngine {
 public:
  // `manager`, `comm` and `metrics` are borrowed and must outlive the
  // engine.
  SyncEngine(SyncEngineOptions options, RunManager* manager,
             collective::Communicator* comm, NodeMetrics* metrics);
  SyncEngine(const SyncEngine&) = delete;
  SyncEngine& operator=(const SyncEngine&) = delete;

  // RunEngine.
  void Start() override {}
  // Pulls waiting for a version end with Unavailable.
  void Stop() override;
  uint64_t BucketBytes(uint64_t asked) const override { return asked; }
  absl::StatusOr<std::shared_ptr<Run>> CreateRun(
      const std::vector<proto::TensorSpec>& tensors,
      const RunFactoryOptions& options) override;
  bool SharesParameters() const override { return true; }
  int BucketsPerStep(const Run& run) const override;
  std::vector<std::pair<uint64_t, uint64_t>> OwnedRanges(
      const Run& run) const override;
  std::string DescribeRun(const Run& run) const override;
  void RunBegan(const std::shared_ptr<Run>& run) override;
  void ParametersReady(Run& run) override;
  void RunEnded(const Run& run) override;
  int64_t Steps(const Run& run) const override;
  // Queues the push as a round (RunManager::Submit).
  void Push(const WorkerHandle& worker,
            const proto::WorkerRequest& request) override;
  // Waits for the version (its staleness bound), copies.
  void Pull(const WorkerHandle& worker,
            const proto::WorkerRequest& request) override;
  // One bucket of a push round.
  absl::Status PushRound(std::vector<Round>& rounds, Run& run,
                         bool* applied) override;
  // A run with a replica or durable checkpoints, failed for a peer's loss
  // (Unavailable, DeadlineExceeded, Aborted, Cancelled), may go on:
  // continuation.h.
  bool MayContinue(const Run& run, const absl::Status& why) const override;
  absl::StatusOr<std::shared_ptr<Run>> ContinueRun(
      const CarriedRun& carried, const RunFactoryOptions& options,
      const collective::CallOptions& call, int64_t* version) override;
  void RunContinued(const std::shared_ptr<Run>& run, int64_t version) override;
  // From the earlier run's checkpoints under checkpoint_root (none when
  // this engine writes none): continuation.h ResumeFromCheckpoint.
  absl::StatusOr<int64_t> ResumeFromCheckpoint(
      Run& run, uint64_t from_run_id, const RunFactoryOptions& options,
      const collective::CallOptions& call) override;

 private:
  // Checks the round's step and bucket; "step s [bucket b] on self".
  absl::Status CheckPushRound(const std::vector<Round>& rounds,
                              const std::string& where, int buckets);
  // Observes each worker's staleness: the step against the version it
  // computed on.
  void ObserveStaleness(const std::vector<Round>& rounds);
  // The workers' ReportStepTimes carried by a push round.
  void RecordStepTimes(const std::vector<Round>& rounds, Run& run);
  // After the step's last bucket: version step + 1, with no pull reading.
  absl::Status Apply(SyncRun& run, int64_t step, const std::string& where,
                     bool* applied);
  // Waits for the version a pull needs; the run to copy from and the
  // version it holds, or why not.
  absl::StatusOr<std::shared_ptr<SyncRun>> AwaitVersion(
      const std::shared_ptr<Run>& run, int64_t needed, absl::Time deadline,
      int64_t* returned);
  absl::Status ShuttingDown() const;
  // The run's shard and replica sizes in the metrics.
  void NoteRunMemory(const SyncRun& run);
  // Hands this daemon's shard at its master version to the checkpoint
  // writer (Apply, every checkpoint_every_steps versions; a resumed run's
  // start).
  void SubmitCheckpoint(const SyncRun& run);
  bool checkpointing() const {
    return options_.checkpoints != nullptr &&
           (options_.checkpoint_every_steps > 0 || by_interval());
  }
  bool by_interval() const {
    return options_.checkpoint_interval > absl::ZeroDuration();
  }

  const SyncEngineOptions options_;
  RunManager* const manager_;
  NodeMetrics* const metrics_;
  collective::Communicator* const comm_;
  // ApplyStep on the step thread; CopyParameters in Pull.
  StepDataPath data_path_;
  // Step thread only: the bucket the running step expects next.
  int next_bucket_ = 0;

  // Waits are conditions on what it guards (Mutex::AwaitWithDeadline).
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // The running run (RunBegan to RunEnded), or null.
  std::shared_ptr<SyncRun> run_ ABSL_GUARDED_BY(mu_);
  int64_t applied_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool updating_ ABSL_GUARDED_BY(mu_) = false;
  int readers_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_SYNC_ENGINE_H_
