// Continuation: a run of the synchronous step goes on in a group re-formed
// without some of its daemons (DESIGN.md "Failure"), from the last step
// every shard can be brought to.
//
// What each survivor holds when its run stopped (sync_run.h): its master
// shard and optimizer state at `master_version` (the version before it in
// undo_*), and the replica of its owner's at replica `version`, with the
// owner's gradient of `gradient_version` in the shift buffer once that
// step's shift returned. The order of a step (step_data_path.h) bounds what
// the survivors can disagree on: a rank updates its shard for version v + 1
// only after every rank passed the barrier of version v (their pushes of
// step v reach it only then), so the masters differ by at most one version
// and a replica lags its owner by at most one, its gradient in hand once
// the shift returned.
//
// PlanResume picks the version V the run goes on from: the newest of M and
// M - 1 (M the newest master) at which every old shard can be had — a
// survivor's own (its master at V, or its undo at V), a lost rank's from
// its buddy (the replica at V, or at V - 1 with the gradient of V in hand,
// applied now). A step any worker was told is committed passed its
// barrier on some daemon, so every rank had shifted it: V includes it
// (acknowledged updates are never lost). Both a rank and its buddy lost:
// that shard has no copy, and the run cannot go on (FailedPrecondition
// naming both).
//
// Runs of optimizer "none" (plain all-reduce jobs: the SVM, worker-side
// PyTorch) hold no state a loss can take: their shards are the initial
// parameters at every version, so they go on whoever was lost, from the
// first carrier's parameters (no replica needed).
//
// ContinueRun runs the exchange on the new group's communicator: every
// daemon's account (an all-reduce of small integers), the plan (each
// computes the same), each shard brought to V by the daemon that has it,
// then one all-reduce of the whole master and optimizer state, each value
// written by exactly one daemon and -0.0 by the others (x + -0.0 == x for
// every float, so the sum moves the values bit for bit), from which each
// daemon takes its shard, its new buddy's replica and the parameters of
// version V. Every survivor ends with the same parameters, and each shard
// with the state its owner (or buddy) held: bit-identical to a run that
// had stopped at V.
//
// Durable checkpoints (checkpoint.h). Where no survivor holds a lost
// shard at either version (a daemon and its buddy lost together, or a run
// without replicas), the run goes on from the newest version written whole
// to the checkpoint folder, if every daemon sees one: each old rank's file
// read by one daemon (old rank o by new rank o mod N), checked, and moved
// by the same all-reduce. Every survivor's newer state is dropped: an
// explicit rollback, told to the workers (their next step) and counted.
// A file that does not check fails the run on every daemon, naming it:
// never wrong values.
//
// A daemon confirms the move after it (run/carry_exchange.h ConfirmMoved);
// one whose confirmation fails keeps the new state beside the old, and
// the next plan takes a state every carrier holds (ChooseAndPlan).
//
// Daemons that join (a daemon restarted, or a newcomer, taken into a
// running run's group): they carry no state (their account says old rank
// -1) and take part in the exchange with -0.0 everywhere; the first
// daemon that carries the run sends the run's tensor table to every
// daemon (its bytes in one all-reduce), and the all-reduce of the state
// gives the joiners their shard, their buddy's replica and the
// parameters like everyone else. A restarted daemon's old shard is a
// lost rank's: from its buddy's replica (or the checkpoint). At least one
// daemon of the old group must carry the run.
//
// Thread-compatible: the step thread (or the regroup thread, before the new
// plane serves anyone) owns the runs it is handed.
#ifndef STARLING_SERVER_NODE_SYNC_CONTINUATION_H_
#define STARLING_SERVER_NODE_SYNC_CONTINUATION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/collective/communicator.h"
#include "server/node/run/carry_exchange.h"
#include "server/node/run/run_factory.h"
#include "server/node/sync/checkpoint.h"
#include "server/node/sync/sync_run.h"

namespace starling {
namespace node {

// One daemon's account of the run it carries into the new group.
struct CarryAccount {
  int64_t run_id = 0;     // 0: carries no state of it (it joins)
  int64_t old_rank = -1;  // -1: it joins
  int64_t old_size = 0;
  int64_t master_version = 0;
  int64_t replica_of = -1;  // old rank; -1: no replica
  int64_t replica_version = -1;
  int64_t gradient_version = -1;
  int64_t local_workers = 0;
  // The elements of the run's flat vector (all must agree).
  int64_t elements = 0;
  // The newest version of the run this daemon sees written whole to the
  // checkpoint folder, by group epoch durable_epoch of durable_ranks; -1:
  // none; kNoCheckpoints: the job writes none.
  int64_t durable_version = kNoCheckpoints;
  int64_t durable_epoch = 0;
  int64_t durable_ranks = 0;
  // The bytes of the run's tensor table (proto::TensorTable).
  int64_t table_bytes = 0;
  // Which state of the run it holds (SyncRun::state_id).
  int64_t state_id = 0;
  static constexpr int64_t kNoCheckpoints = -2;
  static constexpr int kFields = 14;
};

// `run` as rank `old_rank` of `old_size` held it; null: this daemon joins
// (old rank -1, no state).
CarryAccount AccountOf(const SyncRun* run, uint64_t run_id, int old_rank,
                       int old_size, int local_workers);

struct ResumePlan {
  // The version the run goes on from (the next step workers push).
  int64_t version = 0;
  // Index = old rank: the new rank that holds that shard at `version`,
  // and whether in its replica (the old rank was lost).
  std::vector<int> source;
  std::vector<bool> from_replica;
  // Every worker of the new group.
  int total_workers = 0;
  // The newest master version any survivor held (version or version + 1).
  int64_t newest = 0;
  // The run's flat vector, and how many daemons join it (no state).
  int64_t elements = 0;
  int joining = 0;
  // Set when the run goes on from a durable checkpoint (no survivor holds
  // some shard): the version written whole, and which new rank reads each
  // of its files (index = the checkpoint's rank).
  std::optional<WholeVersion> checkpoint;
  std::vector<int> readers;
  // Optimizer "none": no shard ever changes, so the first carrier's
  // parameters are every shard's at every version (source: it, for all).
  bool stateless = false;
};

// Which state every daemon brings (run/carry_exchange.h ChooseCarried),
// and the plan from those (PlanResume): `held[r]`, daemon r's accounts of
// its held and unconfirmed states (old rank -1: none).
using SyncCarryChoice = CarryChoice<CarryAccount, ResumePlan>;
absl::StatusOr<SyncCarryChoice> ChooseAndPlan(
    uint64_t run_id,
    const std::vector<std::pair<CarryAccount, CarryAccount>>& held,
    bool stateless = false);

// The plan every daemon computes alike from the accounts (index = new
// rank). FailedPrecondition when no daemon carries the run's state, one
// carries another run, the accounts disagree on the old group or the
// model, or a shard has no copy at either candidate version (naming the
// old ranks) and no version was checkpointed whole that every daemon of
// the old group sees. `stateless` (optimizer "none"): the run goes on at
// the newest version from the first carrier's parameters, whoever was lost.
absl::StatusOr<ResumePlan> PlanResume(uint64_t run_id,
                                      const std::vector<CarryAccount>& accounts,
                                      bool stateless = false);

// The exchange above. `carried` (null: this daemon joins the run) is this
// daemon's run as rank `old_rank` of `old_size` left it; `checkpoints` the
// run's checkpoint folder (null: the job writes none); `options` the new run's
// (run id, rank and size in the new group, optimizer, buddy distance;
// total_workers is the plan's). Returns the new run at `*version` (its
// parameters, master, state and replica filled), and in `*from_checkpoint` (may
// be null) the checkpoint it went on from, if any. The plan's, the checkpoint's
// and the collectives' errors.
absl::StatusOr<std::shared_ptr<SyncRun>> ContinueRun(
    const std::shared_ptr<SyncRun>& carried, int old_rank, int old_size,
    int local_workers, const CheckpointFolder* checkpoints,
    RunFactoryOptions options, collective::Communicator* comm,
    const collective::CallOptions& call, int64_t* version,
    std::optional<WholeVersion>* from_checkpoint = nullptr);

// A run that begins where an earlier one stopped (the whole cluster
// restarted): `run` (just created, its initial parameters in) takes the
// newest version of the earlier run every daemon sees written whole in
// `folder` (that run's), each file read by one daemon and checked, the
// state moved by one all-reduce, as a continuation does. Returns that
// version, or 0 (and `run` untouched) when some daemon sees none;
// `*from_checkpoint` (may be null) names it. A file that does not check fails
// it on every daemon, naming the file. The collectives' errors.
absl::StatusOr<int64_t> ResumeFromCheckpoint(
    SyncRun& run, const CheckpointFolder& folder,
    const RunFactoryOptions& options, collective::Communicator* comm,
    const collective::CallOptions& call,
    std::optional<WholeVersion>* from_checkpoint = nullptr);

// This daemon's shard of `run` at its master version, as checkpoint.h
// writes it: rank `rank` of `ranks` in group epoch `epoch`.
ShardCheckpoint CheckpointOf(const SyncRun& run, int rank, int ranks,
                             uint64_t epoch, const std::string& optimizer);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_SYNC_CONTINUATION_H_
