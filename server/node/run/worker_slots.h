// WorkerSlots: the local worker slots of a RunManager and the rounds queued
// in them.
//
// A daemon has `local_workers` slots, one per worker index. A slot is empty,
// attached (a connected worker), missing (its worker left a running run
// without finishing) or finished (its worker called Finish). A missing slot
// holds the run's rounds for `grace`: a new worker with the same index
// resumes in its place (Attach fills the HelloReply with the run and the step
// its predecessor reached), and past the grace CheckGrace names the missing
// worker for the engine to fail the run with. A worker that attaches and
// leaves before its run began changes nothing.
//
// Each slot's requests queue in arrival order (Round); once every slot has
// one queued (RoundReady), TakeRound takes the head of each.
//
// Time comes in as arguments (`now`), so that the grace can be tested
// without waiting.
//
// Thread-compatible: RunManager holds it under its mutex (ABSL_GUARDED_BY),
// and every call runs under that lock. Nothing here blocks or replies.
#ifndef STARLING_SERVER_NODE_RUN_WORKER_SLOTS_H_
#define STARLING_SERVER_NODE_RUN_WORKER_SLOTS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/node/run/round.h"
#include "server/node/run/run.h"
#include "server/node/worker/worker_session.h"

namespace starling {
namespace node {

class WorkerSlots {
 public:
  struct Slot {
    proto::WorkerStatus::State state = proto::WorkerStatus::STATE_UNSPECIFIED;
    bool connected = false;
    // The current (or last) worker in this slot.
    WorkerHandle worker;
    // The run this slot takes part in; 0: declaring for the next one.
    uint64_t run_id = 0;
    // Steps of the run whose every bucket was consumed from this slot, and
    // the buckets consumed of step next_step.
    int64_t next_step = 0;
    int next_bucket = 0;
    // The version the worker's last pull returned (-1: none yet).
    int64_t last_pulled_version = -1;
    // All-reduce and barrier rounds consumed from this slot since its last
    // push round: a replacement skips them (HelloReply collectives_done).
    int collectives_since_step = 0;
    // Attached in place of a missing worker, not yet committed: its
    // declarations are checked against the run's layout.
    bool resuming = false;
    size_t resumed_declarations = 0;
    absl::Time missing_since;
    std::deque<Round> queue;
  };
  // Rounds answered with a status, to reply to once the lock is released.
  using Replies = std::vector<std::pair<Round, absl::Status>>;

  // How Attach filled the slot.
  enum class Attached {
    kNew,      // empty slot: the worker declares for the next run
    kResumed,  // in place of a missing worker of the running run
  };
  // What Detach left behind.
  enum class Detached {
    kReplaced,  // not this slot's current worker (or no such index): no-op
    kFinished,  // it had finished: its finish round stays queued
    kMissing,   // left the running run: the slot holds it for the grace
    kGone,      // before its run began or after it ended: slot emptied
  };
  // What a Declare is for.
  enum class Declaring {
    kResumedRun,  // a replacement declared the next tensor of the run
    kNextRun,     // a declaration for the next run (the caller records it)
  };

  // `self` names the daemon in messages ("rank 2 (127.0.0.1:29502)").
  WorkerSlots(int local_workers, absl::Duration grace, std::string self);

  int size() const { return static_cast<int>(slots_.size()); }
  // REQUIRES: 0 <= index < size().
  const Slot& at(int index) const { return slots_[index]; }

  // "local worker 'w' (index 1, pid 42) of rank 0 (...)".
  std::string WorkerName(const WorkerHandle& worker) const;

  // Fills `reply`'s grace_ms, run_id and next_step. AlreadyExists when the
  // index is taken (or finishing); FailedPrecondition when its worker
  // finished a run that is still running. A worker of the same process
  // (pid) as the attached one replaces it, as if that one had closed its
  // connection first; `running` is the running run or null. REQUIRES:
  // index in range.
  absl::StatusOr<Attached> Attach(const WorkerHandle& worker,
                                  const Run* running, absl::Time now,
                                  proto::HelloReply* reply);
  // The worker's connection closed; `running` is the running run or null.
  Detached Detach(const WorkerHandle& worker, const Run* running,
                  absl::Time now);
  // Checks a declaration of `spec`: a replacement declares the running run's
  // tensors again, in order (InvalidArgument otherwise); no declarations
  // once the slot's run began (FailedPrecondition). kNextRun resets the
  // slot for the next run. REQUIRES: index in range.
  absl::StatusOr<Declaring> Declare(const WorkerHandle& worker,
                                    const proto::TensorSpec& spec,
                                    const Run* running);

  // The slot of `worker`, or null when another worker replaced it.
  // REQUIRES: index in range.
  Slot* Find(const WorkerHandle& worker);
  const Slot* Find(const WorkerHandle& worker) const;
  // Queues a round in its worker's slot; a finish marks the slot finished.
  void Enqueue(Round round);
  // Every slot has a round queued.
  bool RoundReady() const;
  // Takes the head of every queue, in worker-index order; a push advances
  // its slot's next_bucket, and its next_step after bucket `buckets` - 1
  // (the run's last). REQUIRES: RoundReady().
  std::vector<Round> TakeRound(int buckets);

  // Unavailable naming the first missing worker whose grace passed by
  // `now`; otherwise the earliest time one will (InfiniteFuture if none).
  absl::StatusOr<absl::Time> CheckGrace(absl::Time now) const;

  // Every slot takes part in run `run_id` from step 0.
  void BeginRun(uint64_t run_id);
  // The run begun goes on from step `step` (a durable checkpoint).
  void StartAt(int64_t step);
  // Every slot takes part in run `run_id`, carried on from an earlier
  // group at step `step`, its worker missing since `now` (the workers
  // reconnect and resume in their place, within the grace).
  void ContinueRun(uint64_t run_id, int64_t step, absl::Time now);
  // Moves every queued round into `replies` with `status`.
  void FailQueued(const absl::Status& status, Replies* replies);
  // The running run failed: queued rounds go into `replies` with `failed`;
  // disconnected slots empty, finished ones attached again.
  void RunFailed(const absl::Status& failed, Replies* replies);
  // The running run finished: every slot back to declaring.
  void RunFinished();

  // Connected workers.
  int connected() const;
  // Every non-empty slot, with the grace left of missing ones at `now`.
  std::vector<proto::WorkerStatus> Status(absl::Time now) const;

 private:
  const absl::Duration grace_;
  const std::string self_;
  std::vector<Slot> slots_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_WORKER_SLOTS_H_
