// RunEngine: what one family of training modes does with a run, behind the
// RunManager that owns everything the modes share (worker slots, rounds,
// commit and rendezvous, the run's lifecycle, history, declared tensors).
// DESIGN.md "Training modes". Two families implement it:
//   - the synchronous step (sync/SyncEngine: sync SGD, sync EASGD, async
//     SGD's bounded staleness): a push is a round, the step thread reduces
//     and applies it, pulls wait for the step's version;
//   - the shard owners (ps/PsEngine: parameter server, async and
//     momentum EASGD, Hogwild, round-robin): a push goes to the daemons
//     owning its ranges and is applied at once, a pull reads them.
// The daemon makes one engine for its job's mode and hands it the workers'
// pushes and pulls; the manager calls the rest.
//
// Each engine keeps its own run state: CreateRun returns a Run of its own
// kind (sync/sync_run.h, ps/ps_engine.h), and every later call of the
// manager passes back a run this engine created.
//
// Threads and locks. CreateRun, ParametersReady and PushRound run on the
// manager's step thread, holding no lock. RunBegan, RunEnded and Steps are
// called under the manager's lock: an engine may take its own lock in them (the
// manager's first, never the reverse) but must not block or call back into
// the manager. Push and Pull run on the workers' reader threads and answer
// the worker themselves; they may call the manager (holding no engine lock).
#ifndef STARLING_SERVER_NODE_RUN_RUN_ENGINE_H_
#define STARLING_SERVER_NODE_RUN_RUN_ENGINE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/run/run_factory.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

// A run of an earlier group this daemon took part in, handed to the
// engine of the re-formed group (RunEngine::ContinueRun).
struct CarriedRun {
  uint64_t run_id = 0;
  // This daemon's state of it (null: none; it was not a member).
  std::shared_ptr<Run> run;
  // This daemon's place in the old group.
  int old_rank = -1;
  int old_size = 0;
  int local_workers = 0;
};

// Whether a run failed with `why` for a peer's loss (gone, silent, or a
// run its peers stopped), not for a bad request or a missing worker: the
// codes a lost daemon's data plane and the abort notices give.
inline bool IsPeerLoss(const absl::Status& why) {
  switch (why.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

class RunEngine {
 public:
  virtual ~RunEngine() = default;

  // The engine's own threads, if any. Stop ends pushes and pulls in flight
  // (each answered with an error) and later ones at once; idempotent.
  virtual void Start() = 0;
  virtual void Stop() = 0;

  // --- A run's shape and lifecycle ------------------------------------------

  // The gradient bucket size a run's tensors are grouped by, given the one
  // the workers' commit asks for (0: one bucket).
  virtual uint64_t BucketBytes(uint64_t asked) const = 0;
  // The run of `tensors` (buckets assigned) with its memory and optimizer
  // (run_factory.h for the parts every run has).
  virtual absl::StatusOr<std::shared_ptr<Run>> CreateRun(
      const std::vector<proto::TensorSpec>& tensors,
      const RunFactoryOptions& options) = 0;
  // Whether a committed worker gets the parameters' memfd with its commit
  // reply, to read them in place (client ParametersView).
  virtual bool SharesParameters() const = 0;
  // Buckets a step of `run` is pushed in (rounds per step).
  virtual int BucketsPerStep(const Run& run) const = 0;
  // This rank's ranges [begin, end) of the flat vector in `run` (status).
  virtual std::vector<std::pair<uint64_t, uint64_t>> OwnedRanges(
      const Run& run) const = 0;
  // What the run's begin log line says of its shape, e.g. "3 bucket(s),
  // float16 on the wire".
  virtual std::string DescribeRun(const Run& run) const = 0;

  // `run` became the running run, before its initial parameters are in:
  // no pull may read them until ParametersReady. Under the manager's lock.
  virtual void RunBegan(const std::shared_ptr<Run>& run) = 0;
  // The initial parameters are in run.store->parameters() on every daemon.
  // Step thread, no lock; not called when their broadcast failed (the run
  // ends instead).
  virtual void ParametersReady(Run& run) = 0;
  // `run` finished or failed: it is no longer the running run, waiting
  // pulls end. Under the manager's lock.
  virtual void RunEnded(const Run& run) = 0;
  // Steps applied in `run` (shard owners: updates of this daemon's shard).
  // Under the manager's lock.
  virtual int64_t Steps(const Run& run) const = 0;

  // --- Worker requests ------------------------------------------------------

  // A push and a pull (reader threads); each answers the worker.
  virtual void Push(const WorkerHandle& worker,
                    const proto::WorkerRequest& request) = 0;
  virtual void Pull(const WorkerHandle& worker,
                    const proto::WorkerRequest& request) = 0;
  // A round of pushes (one per local worker, same step and bucket) queued
  // by Push through the manager, on the step thread. `*applied`: the step's
  // last bucket moved the parameters to the next version.
  virtual absl::Status PushRound(std::vector<Round>& rounds, Run& run,
                                 bool* applied) = 0;

  // --- Continuation in a re-formed group (DESIGN.md "Failure") -------------

  // Whether `run`, failed here with `why`, may go on in a group re-formed
  // without the lost daemon(s): its mode keeps every shard's state on a
  // second daemon and `why` is a peer's loss (not a bad request or a
  // missing worker). Under the manager's lock. Default: never.
  virtual bool MayContinue(const Run& /*run*/,
                           const absl::Status& /*why*/) const {
    return false;
  }
  // The run `carried` (this daemon's state of it; `carried.run` may be null)
  // continued on this engine's (new) group: agreed with every daemon of
  // the group, returned at `*version` (the next step workers push), not
  // yet running. Called on one thread while this engine serves no run;
  // blocks in collectives bounded by `call`. Default: Unimplemented.
  virtual absl::StatusOr<std::shared_ptr<Run>> ContinueRun(
      const CarriedRun& /*carried*/, const RunFactoryOptions& /*options*/,
      const collective::CallOptions& /*call*/, int64_t* /*version*/) {
    return absl::UnimplementedError("this mode's runs do not go on");
  }
  // ContinueRun's run is the running run at `version` (instead of RunBegan
  // and ParametersReady). Under the manager's lock.
  virtual void RunContinued(const std::shared_ptr<Run>& /*run*/,
                            int64_t /*version*/) {}
  // `run` (begun, its initial parameters ready, no worker told yet) goes
  // on from the newest durable checkpoint of the earlier run `from_run_id`
  // every daemon sees whole: returns that version (the workers' first
  // step), or 0 where there is none (or the mode keeps none). Step thread;
  // blocks in collectives bounded by `call`. Default: 0.
  virtual absl::StatusOr<int64_t> ResumeFromCheckpoint(
      Run& /*run*/, uint64_t /*from_run_id*/,
      const RunFactoryOptions& /*options*/,
      const collective::CallOptions& /*call*/) {
    return 0;
  }
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_ENGINE_H_
