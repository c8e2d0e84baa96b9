// SyncEngine: the daemon's step thread and the rounds it runs.
//
// A round is one collective request from every local worker: the end of the
// tensor declarations (commit), a push of step s (sync modes), a worker
// all-reduce, or a barrier. Each worker's collective requests queue in
// arrival order; once every local worker has one queued, the step thread
// takes the head of each queue, checks that they are the same request (same
// kind, same step, same length), runs it and answers every worker. Since
// every worker of the job issues the same sequence, every daemon runs the
// same sequence of collectives.
//
// The synchronous step (DESIGN.md "One synchronous step"), for push round s:
//   1. local reduce: the workers' gradients, read in place from their pools,
//      summed in worker-index order into the shard store's gradient buffer;
//   2. reduce-scatter (sum) across daemons: this rank's block is the job's
//      gradient sum of its shard;
//   3. the optimizer (gradient scale 1 / total workers, so the mean) updates
//      this rank's shard of the parameters;
//   4. all-gather of the parameters;
//   5. version s + 1 is published; pulls waiting for it copy the parameters
//      into their workers' pools.
// Pulls run on the workers' reader threads. While a step writes the
// parameters (3-4) no pull reads them: the step waits for readers to leave
// and pulls wait for the step ("updating").
//
// Commit: the local workers' declaration lists must agree; the daemons then
// exchange their tables (transport control messages, tag kLayoutTag) and
// check every rank's against rank 0's; the layout is fixed from then on.
//
// Errors: a failed collective or update is sticky: every later round and
// pull fails with it (the job cannot go on consistently). Messages name the
// op, the step, this daemon and (from the communicator) the lost peer.
//
// Thread-safe. Threads: the step thread (Start/Stop); callers' threads for
// Submit/Pull/DropWorker.
#ifndef STARLING_SERVER_NODE_SYNC_ENGINE_H_
#define STARLING_SERVER_NODE_SYNC_ENGINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/declared_tensors.h"
#include "server/node/node_metrics.h"
#include "server/node/worker_session.h"
#include "server/shard/optimizer/optimizer.h"
#include "server/shard/shard_store.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

// Control tag of the commit's table exchange (below the collectives' range).
inline constexpr uint32_t kLayoutTag = 1;

struct SyncEngineOptions {
  // Workers of this daemon; rounds wait for all of them.
  int local_workers = 1;
  // False in parameter-server mode: pushes go to PsEngine, not rounds.
  bool pushes_are_rounds = true;
  // Per collective, and how long a pull waits for its version.
  absl::Duration timeout = absl::Seconds(30);
  // Elements of the flat parameter vector (the job's parameter count).
  uint64_t parameter_count = 0;
  // "rank 2 (127.0.0.1:29502)": this daemon in messages.
  std::string self;
};

class SyncEngine {
 public:
  // Every pointer is borrowed and must outlive the engine. `on_step` (may
  // be null) runs on the step thread after each push round, with its status.
  SyncEngine(SyncEngineOptions options, collective::Communicator* comm,
             transport::Transport* transport, DeclaredTensors* declared,
             shard::ShardStore* store, shard::Optimizer* optimizer,
             NodeMetrics* metrics,
             std::function<void(int64_t, const absl::Status&)> on_step);
  ~SyncEngine();
  SyncEngine(const SyncEngine&) = delete;
  SyncEngine& operator=(const SyncEngine&) = delete;

  void Start();
  // Fails queued rounds with Unavailable and joins the step thread.
  void Stop();

  // Queues a commit, push (if pushes are rounds), all-reduce or barrier.
  void Submit(const WorkerHandle& worker, const proto::WorkerRequest& request);
  // Answers a pull (sync modes): waits for the version, copies.
  void Pull(const WorkerHandle& worker, const proto::WorkerRequest& request);
  // The worker left: its queued rounds are dropped, and since no round can
  // complete without it, the other workers' queued and later rounds fail
  // (Unavailable naming `name`). Pulls are not affected.
  void DropWorker(int index, const std::string& name);

  // The committed layout; null before the commit. Immutable once set.
  const TensorLayout* layout() const;
  int total_workers() const;
  int64_t applied_version() const;
  absl::Status error() const;

 private:
  struct Round {
    WorkerHandle worker;
    proto::WorkerRequest request;
    absl::Time submitted;
  };

  void Loop();
  absl::Status Execute(std::vector<Round>& rounds,
                       proto::WorkerResponse* reply);
  absl::Status CheckSame(const std::vector<Round>& rounds) const;
  absl::Status Commit(std::vector<Round>& rounds, proto::WorkerResponse* reply);
  absl::Status Step(std::vector<Round>& rounds);
  absl::Status AllReduce(std::vector<Round>& rounds);
  std::string Describe(const proto::WorkerRequest& request) const;

  const SyncEngineOptions options_;
  collective::Communicator* const comm_;
  transport::Transport* const transport_;
  DeclaredTensors* const declared_;
  shard::ShardStore* const store_;
  shard::Optimizer* const optimizer_;
  NodeMetrics* const metrics_;
  const std::function<void(int64_t, const absl::Status&)> on_step_;
  std::thread thread_;
  std::vector<float> scratch_;  // step thread only: all-reduce sums

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::deque<Round>> queues_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<const TensorLayout> layout_ ABSL_GUARDED_BY(mu_);
  int total_workers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t applied_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool updating_ ABSL_GUARDED_BY(mu_) = false;
  int readers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  // Set once a local worker left; fails rounds.
  absl::Status missing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_ENGINE_H_
