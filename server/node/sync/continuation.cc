#include "server/node/sync/continuation.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/common.pb.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/collective/data_type.h"
#include "server/node/run/carry_exchange.h"
#include "server/node/run/float_bytes.h"

namespace starling {
namespace node {
namespace {

using collective::DataType;

std::vector<int64_t> Pack(const CarryAccount& a) {
  return {a.run_id,           a.old_rank,      a.old_size,
          a.master_version,   a.replica_of,    a.replica_version,
          a.gradient_version, a.local_workers, a.elements,
          a.durable_version,  a.durable_epoch, a.durable_ranks,
          a.table_bytes,      a.state_id};
}

CarryAccount Unpack(const int64_t* f) {
  CarryAccount a;
  a.run_id = f[0];
  a.old_rank = f[1];
  a.old_size = f[2];
  a.master_version = f[3];
  a.replica_of = f[4];
  a.replica_version = f[5];
  a.gradient_version = f[6];
  a.local_workers = f[7];
  a.elements = f[8];
  a.durable_version = f[9];
  a.durable_epoch = f[10];
  a.durable_ranks = f[11];
  a.table_bytes = f[12];
  a.state_id = f[13];
  return a;
}

// A daemon that joins the run: it carries no state of it.
bool Joins(const CarryAccount& a) { return a.old_rank < 0; }

// The first daemon that carries the run (-1: none).
int FirstCarrier(const std::vector<CarryAccount>& accounts) {
  for (size_t r = 0; r < accounts.size(); ++r) {
    if (!Joins(accounts[r])) return static_cast<int>(r);
  }
  return -1;
}

// Whether `a`'s replica can be brought to version v.
bool ReplicaAt(const CarryAccount& a, int64_t v) {
  return a.replica_version == v ||
         (a.replica_version == v - 1 && a.gradient_version == v);
}

// Whether `a`'s own shard can be brought to version v (its master, or the
// undo of its last update).
bool MasterAt(const CarryAccount& a, int64_t v) {
  return a.master_version == v || (a.master_version == v + 1 && v >= 0);
}

// The plan at version v, or the old ranks with no copy at it.
bool PlanAt(const std::vector<CarryAccount>& accounts, int64_t v,
            ResumePlan* plan, std::vector<std::string>* missing) {
  const int old_size =
      static_cast<int>(accounts[FirstCarrier(accounts)].old_size);
  plan->version = v;
  plan->source.assign(old_size, -1);
  plan->from_replica.assign(old_size, false);
  bool ok = true;
  for (size_t r = 0; r < accounts.size(); ++r) {
    const CarryAccount& a = accounts[r];
    if (Joins(a)) continue;
    if (!MasterAt(a, v)) {
      ok = false;
      missing->push_back(absl::StrCat("old rank ", a.old_rank, "'s own (at ",
                                      a.master_version, ")"));
      continue;
    }
    plan->source[a.old_rank] = static_cast<int>(r);
  }
  for (int o = 0; o < old_size; ++o) {
    if (plan->source[o] >= 0) continue;
    bool found = false;
    for (size_t r = 0; r < accounts.size(); ++r) {
      if (accounts[r].replica_of == o && ReplicaAt(accounts[r], v)) {
        plan->source[o] = static_cast<int>(r);
        plan->from_replica[o] = true;
        found = true;
        break;
      }
    }
    if (found) continue;
    ok = false;
    // Is it a member, or was its buddy lost with it?
    bool present = false;
    for (const CarryAccount& a : accounts) present |= a.old_rank == o;
    if (present) continue;  // named above
    std::string holder = "its buddy was lost with it";
    for (const CarryAccount& a : accounts) {
      if (a.replica_of == o) {
        holder = absl::StrCat("the replica on old rank ", a.old_rank,
                              " is at version ", a.replica_version);
      }
    }
    missing->push_back(absl::StrCat("old rank ", o, "'s (", holder, ")"));
  }
  return ok;
}

void OwnLayout(const SyncRun& run, ShardRanges* ranges,
               std::vector<uint64_t>* offsets) {
  for (const Bucket& b : run.buckets) {
    ranges->emplace_back(b.owned_begin, b.owned_end);
    offsets->push_back(b.master_offset);
  }
}

void ReplicaLayout(const ShardReplica& replica, ShardRanges* ranges,
                   std::vector<uint64_t>* offsets) {
  for (const ShardReplica::Part& p : replica.parts) {
    ranges->emplace_back(p.begin, p.end);
    offsets->push_back(p.offset);
  }
}

// Every daemon's account, `mine` among them, in rank order.
absl::StatusOr<std::vector<CarryAccount>> ExchangeAccounts(
    const CarryAccount& mine, collective::Communicator* comm,
    const collective::CallOptions& call, const std::string& what) {
  STARLING_ASSIGN_OR_RETURN(const std::vector<int64_t> table,
                            ExchangeRows(Pack(mine), comm, call, what));
  std::vector<CarryAccount> accounts;
  for (int r = 0; r < comm->size(); ++r) {
    accounts.push_back(Unpack(table.data() + r * CarryAccount::kFields));
  }
  return accounts;
}

// `a` says which version of the run this daemon sees whole in `folder`.
void NoteDurable(const CheckpointFolder& folder, CarryAccount* a) {
  const std::vector<WholeVersion> whole = folder.WholeVersions();
  a->durable_version = whole.empty() ? -1 : whole[0].version;
  if (!whole.empty()) {
    a->durable_epoch = static_cast<int64_t>(whole[0].epoch);
    a->durable_ranks = whole[0].ranks;
  }
}

// The daemons that read checkpoint files: those of the old group (a
// daemon that joins may see none), or every daemon where none carries the
// run (a whole-cluster restart).
std::vector<int> CheckpointReaders(const std::vector<CarryAccount>& accounts) {
  std::vector<int> readers;
  for (size_t r = 0; r < accounts.size(); ++r) {
    if (!Joins(accounts[r])) readers.push_back(static_cast<int>(r));
  }
  if (readers.empty()) {
    for (size_t r = 0; r < accounts.size(); ++r) {
      readers.push_back(static_cast<int>(r));
    }
  }
  return readers;
}

// The plan that takes every shard from checkpoint `whole`: old rank o's
// file read by the (o mod |readers|)-th reader.
ResumePlan CheckpointPlan(const WholeVersion& whole,
                          const std::vector<int>& readers) {
  ResumePlan plan;
  plan.version = whole.version;
  plan.checkpoint = whole;
  for (int o = 0; o < whole.ranks; ++o) {
    plan.readers.push_back(readers[o % readers.size()]);
  }
  return plan;
}

// The checkpoint every reader sees whole: the oldest of their newest (one
// a daemon saw whole stays so: the writers keep two). Nullopt when a
// reader sees none or the job writes none.
std::optional<WholeVersion> AgreedCheckpoint(
    const std::vector<CarryAccount>& accounts,
    const std::vector<int>& readers) {
  std::optional<WholeVersion> agreed;
  for (int r : readers) {
    const CarryAccount& a = accounts[r];
    if (a.durable_version < 0 || a.durable_ranks < 1) return std::nullopt;
    if (!agreed.has_value() || a.durable_version < agreed->version) {
      agreed = WholeVersion{a.durable_version,
                            static_cast<uint64_t>(a.durable_epoch),
                            static_cast<int>(a.durable_ranks)};
    }
  }
  return agreed;
}

// Why no checkpoint serves, for the error.
std::string NoCheckpoint(const std::vector<CarryAccount>& accounts) {
  const std::vector<int> readers = CheckpointReaders(accounts);
  for (int r : readers) {
    if (accounts[r].durable_version == CarryAccount::kNoCheckpoints) {
      return "; the job writes no durable checkpoints (--checkpoint_dir, "
             "--checkpoint_every_steps or --checkpoint_interval) to go on "
             "from instead";
    }
  }
  for (int r : readers) {
    if (accounts[r].durable_version < 0) {
      return absl::StrCat("; and rank ", r,
                          " of the new group sees no version of it "
                          "checkpointed whole");
    }
  }
  return "";
}

// 3. This daemon's shards at the plan's version: its own (rolled back to
// it where it updated past it) and, where the plan takes it from here, its
// replica's (brought to it with the gradient in hand), written into `full`.
absl::Status HeldShards(SyncRun& old, int old_rank, const ResumePlan& plan,
                        uint64_t elements, int slots,
                        std::vector<float>* full) {
  const int64_t v = plan.version;
  if (old.master_version == v + 1) {
    if (old.undo_master.size() != old.master.size()) {
      return absl::InternalError(absl::StrCat(
          "old rank ", old_rank, " kept no undo of its last update"));
    }
    old.master = old.undo_master;
    STARLING_RETURN_IF_ERROR(Annotate(
        old.optimizer->RestoreState(old.undo_state),
        absl::StrCat("rolling old rank ", old_rank, "'s shard back to ", v)));
    old.master_version = v;
    // Used: a later plan (a member lost while the state moved) must not
    // take it for the state before v.
    old.undo_master.clear();
    old.undo_state.clear();
  }
  ShardRanges ranges;
  std::vector<uint64_t> offsets;
  OwnLayout(old, &ranges, &offsets);
  WriteShardState(ranges, offsets, old.master, old.optimizer->state(), slots,
                  elements, *full);
  if (old.replica != nullptr && plan.from_replica[old.replica->of_rank]) {
    ShardReplica& replica = *old.replica;
    if (replica.version == v - 1) {
      // The owner's gradient of v is in the shift buffer: the update the
      // buddy would have applied after the barrier.
      STARLING_RETURN_IF_ERROR(
          Annotate(replica.optimizer->Apply(
                       absl::MakeSpan(replica.master),
                       absl::MakeConstSpan(old.master_gradients)
                           .subspan(replica.half, replica.master.size()),
                       v),
                   absl::StrCat("bringing the replica of old rank ",
                                replica.of_rank, " to version ", v)));
      replica.version = v;
    }
    ranges.clear();
    offsets.clear();
    ReplicaLayout(replica, &ranges, &offsets);
    WriteShardState(ranges, offsets, replica.master, replica.optimizer->state(),
                    slots, elements, *full);
  }
  return absl::OkStatus();
}

// 3'. The checkpoint's files this daemon reads (the plan's readers), each
// checked against the run, written into `full`; then every daemon's
// outcome, agreed (an all-reduce of one flag per rank), so that a file
// that does not check fails the run everywhere, before any state moves.
absl::Status ReadCheckpoint(const CheckpointFolder& folder,
                            const ResumePlan& plan, uint64_t elements,
                            int slots, const RunFactoryOptions& options,
                            collective::Communicator* comm,
                            const collective::CallOptions& call,
                            std::vector<float>* full) {
  const WholeVersion& whole = *plan.checkpoint;
  const int rank = comm->rank();
  absl::Status mine;
  for (int o = 0; o < whole.ranks && mine.ok(); ++o) {
    if (plan.readers[o] != rank) continue;
    absl::StatusOr<ShardCheckpoint> shard = folder.Read(whole, o);
    if (!shard.ok()) {
      mine = shard.status();
      break;
    }
    if (shard->elements != elements || shard->optimizer != options.optimizer ||
        (!shard->master.empty() && shard->state_slots != slots)) {
      mine = absl::FailedPreconditionError(absl::StrCat(
          "the checkpoint ",
          folder.PathOf(whole.version, whole.epoch, o, whole.ranks), " holds ",
          shard->elements, " parameters with optimizer '", shard->optimizer,
          "' (", shard->state_slots, " state slots); the run has ", elements,
          " with '", options.optimizer, "' (", slots, ")"));
      break;
    }
    std::vector<uint64_t> offsets;
    uint64_t offset = 0;
    for (const auto& [begin, end] : shard->ranges) {
      offsets.push_back(offset);
      offset += end - begin;
    }
    WriteShardState(shard->ranges, offsets, shard->master, shard->state, slots,
                    elements, *full);
  }
  STARLING_ASSIGN_OR_RETURN(
      const std::vector<int64_t> failed,
      ExchangeRows({mine.ok() ? 0 : 1}, comm, call,
                   "agreeing that every checkpoint file was read"));
  if (!mine.ok()) {
    return Annotate(mine, absl::StrCat("run ", options.run_id,
                                       " cannot go on from checkpoint "
                                       "version ",
                                       whole.version));
  }
  for (int r = 0; r < comm->size(); ++r) {
    if (failed[r] != 0) {
      return absl::DataLossError(absl::StrCat(
          "run ", options.run_id, " cannot go on from checkpoint version ",
          whole.version, ": rank ", r,
          " of the new group could not read its part (its log names the "
          "file)"));
    }
  }
  return absl::OkStatus();
}

// 5. `run`'s state at version v from `full`: its shard, its replica's
// and the parameters (on a 16-bit wire, what the all-gather of v left: the
// master narrowed).
absl::Status InstallState(const std::vector<float>& full, int64_t v, int slots,
                          SyncRun& run) {
  const uint64_t elements = run.layout.total_elements;
  ShardRanges ranges;
  std::vector<uint64_t> offsets;
  std::vector<float> state;
  OwnLayout(run, &ranges, &offsets);
  ReadShardState(ranges, offsets, full, slots, elements,
                 absl::MakeSpan(run.master), &state);
  STARLING_RETURN_IF_ERROR(run.optimizer->RestoreState(state));
  run.master_version = v;
  if (run.replica != nullptr) {
    ShardReplica& replica = *run.replica;
    ranges.clear();
    offsets.clear();
    ReplicaLayout(replica, &ranges, &offsets);
    ReadShardState(ranges, offsets, full, slots, elements,
                   absl::MakeSpan(replica.master), &state);
    STARLING_RETURN_IF_ERROR(replica.optimizer->RestoreState(state));
    replica.version = v;
  }
  absl::Span<float> params = run.store->parameters();
  if (run.wire == DataType::kFloat32) {
    std::memcpy(params.data(), full.data(), elements * sizeof(float));
  } else {
    collective::FromFloat32(run.wire, full.data(), run.wire16.data(), elements);
    collective::ToFloat32(run.wire, run.wire16.data(), params.data(), elements);
  }
  return absl::OkStatus();
}

}  // namespace

CarryAccount AccountOf(const SyncRun* run, uint64_t run_id, int old_rank,
                       int old_size, int local_workers) {
  CarryAccount a;
  a.local_workers = local_workers;
  if (run == nullptr) return a;  // it joins
  a.old_rank = old_rank;
  a.old_size = old_size;
  a.run_id = static_cast<int64_t>(run_id);
  a.master_version = run->master_version;
  a.elements = static_cast<int64_t>(run->layout.total_elements);
  a.table_bytes = static_cast<int64_t>(TableOf(*run).ByteSizeLong());
  a.state_id = static_cast<int64_t>(run->state_id);
  if (run->replica != nullptr) {
    a.replica_of = run->replica->of_rank;
    a.replica_version = run->replica->version;
    a.gradient_version = run->replica->gradient_version;
  }
  return a;
}

absl::StatusOr<ResumePlan> PlanResume(uint64_t run_id,
                                      const std::vector<CarryAccount>& accounts,
                                      bool stateless) {
  const int carrier = FirstCarrier(accounts);
  if (carrier < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no daemon of the new group (", accounts.size(),
        ") holds state of run ", run_id,
        ": every one joins it; only the old group's survivors can carry it "
        "on"));
  }
  int total_workers = 0;
  int joining = 0;
  int64_t newest = 0;
  const CarryAccount& first = accounts[carrier];
  std::vector<bool> seen(std::max<int64_t>(first.old_size, 0), false);
  for (size_t r = 0; r < accounts.size(); ++r) {
    const CarryAccount& a = accounts[r];
    total_workers += static_cast<int>(a.local_workers);
    if (Joins(a)) {
      ++joining;
      continue;
    }
    if (a.run_id != static_cast<int64_t>(run_id)) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", r, " of the new group carries run ", a.run_id,
                       ", not run ", run_id,
                       ": the daemons disagree on the run that goes "
                       "on"));
    }
    if (a.old_size != first.old_size || a.elements != first.elements ||
        a.old_rank < 0 || a.old_rank >= a.old_size || seen[a.old_rank]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the survivors disagree on run ", run_id, ": rank ", r,
          " was old rank ", a.old_rank, " of ", a.old_size, " with ",
          a.elements, " parameters; rank ", carrier, " old rank ",
          first.old_rank, " of ", first.old_size, " with ", first.elements));
    }
    seen[a.old_rank] = true;
    newest = std::max(newest, a.master_version);
  }
  const auto done = [&](ResumePlan plan) {
    plan.total_workers = total_workers;
    plan.newest = newest;
    plan.elements = first.elements;
    plan.joining = joining;
    return plan;
  };
  ResumePlan plan;
  if (stateless) {
    // Every shard is the initial parameters at every version: the first
    // carrier's copy stands for all of them.
    plan.version = newest;
    plan.stateless = true;
    plan.source.assign(first.old_size, carrier);
    plan.from_replica.assign(first.old_size, false);
    return done(plan);
  }
  std::vector<std::string> missing_newest;
  if (PlanAt(accounts, newest, &plan, &missing_newest)) return done(plan);
  std::vector<std::string> missing;
  if (newest > 0 && PlanAt(accounts, newest - 1, &plan, &missing)) {
    return done(plan);
  }
  const std::vector<int> readers = CheckpointReaders(accounts);
  if (std::optional<WholeVersion> whole = AgreedCheckpoint(accounts, readers)) {
    // Some shard has no copy in memory: every shard from the checkpoint.
    return done(CheckpointPlan(*whole, readers));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "run ", run_id, " cannot go on: no survivor holds ",
      absl::StrJoin(missing.empty() ? missing_newest : missing, "; "),
      " at version ", newest,
      newest > 0 ? absl::StrCat(" or ", newest - 1) : "",
      " (a rank and its buddy lost together, or no replicas)",
      NoCheckpoint(accounts)));
}

absl::StatusOr<SyncCarryChoice> ChooseAndPlan(
    uint64_t run_id,
    const std::vector<std::pair<CarryAccount, CarryAccount>>& held,
    bool stateless) {
  return ChooseCarried<CarryAccount, ResumePlan>(
      held,
      [&](const std::vector<CarryAccount>& accounts) {
        return PlanResume(run_id, accounts, stateless);
      },
      [](const ResumePlan& plan) { return !plan.checkpoint.has_value(); });
}

absl::StatusOr<std::shared_ptr<SyncRun>> ContinueRun(
    const std::shared_ptr<SyncRun>& carried, int old_rank, int old_size,
    int local_workers, const CheckpointFolder* checkpoints,
    RunFactoryOptions options, collective::Communicator* comm,
    const collective::CallOptions& call, int64_t* version,
    std::optional<WholeVersion>* from_checkpoint) {
  const absl::Time began = absl::Now();
  // 1. Every daemon's accounts of what it holds (its held state and an
  // unconfirmed one beside it), and a nonce for the new state's id.
  const HeldStates states = StatesOf(carried.get(), old_rank, old_size);
  const auto row = [&](const HeldState& h) {
    CarryAccount a = AccountOf(static_cast<SyncRun*>(h.run), options.run_id,
                               h.rank, h.size, local_workers);
    if (checkpoints != nullptr) NoteDurable(*checkpoints, &a);
    return Pack(a);
  };
  uint64_t state_id = 0;
  STARLING_ASSIGN_OR_RETURN(
      const auto held,
      ExchangeHeld<CarryAccount>(
          row(states.held), row(states.unconfirmed), Unpack, comm, call,
          absl::StrCat("exchanging the survivors' accounts of run ",
                       options.run_id),
          &state_id));
  // 2. Which state each daemon brings, and the plan, alike on every daemon.
  STARLING_ASSIGN_OR_RETURN(
      SyncCarryChoice choice,
      ChooseAndPlan(options.run_id, held, options.optimizer == "none"));
  const std::vector<CarryAccount>& accounts = choice.accounts;
  ResumePlan& plan = choice.plan;
  const HeldState mine = states.Chosen(choice.which[comm->rank()]);
  SyncRun* const from = static_cast<SyncRun*>(mine.run);
  STARLING_ASSIGN_OR_RETURN(
      std::vector<proto::TensorSpec> tensors,
      ShareTable(from, plan.joining > 0, FirstCarrier(accounts),
                 accounts[FirstCarrier(accounts)].table_bytes, options.run_id,
                 comm, call));
  const int64_t v = plan.version;
  const uint64_t elements = static_cast<uint64_t>(plan.elements);
  STARLING_ASSIGN_OR_RETURN(const int slots, StateSlots(options));
  std::vector<float> full((1 + static_cast<size_t>(slots)) * elements, -0.0f);
  if (plan.checkpoint.has_value()) {
    // 3'. The checkpoint's files this daemon reads, checked; whether every
    // daemon read its own is agreed before the state moves.
    STARLING_RETURN_IF_ERROR(ReadCheckpoint(*checkpoints, plan, elements, slots,
                                            options, comm, call, &full));
  } else if (plan.stateless) {
    if (comm->rank() == FirstCarrier(accounts)) {
      const absl::Span<const float> params = from->store->parameters();
      if (params.size() != elements) {
        return absl::DataLossError(
            absl::StrCat("run ", options.run_id, " holds ", params.size(),
                         " parameters here; its account says ", elements));
      }
      std::copy(params.begin(), params.end(), full.begin());
    }
  } else if (from != nullptr) {
    STARLING_RETURN_IF_ERROR(
        HeldShards(*from, mine.rank, plan, elements, slots, &full));
  }
  // 4. Every shard to every daemon, bit for bit (-0.0 is the identity).
  const absl::Time moving = absl::Now();
  STARLING_RETURN_IF_ERROR(Annotate(
      comm->AllReduce(AsBytes(absl::MakeSpan(full)), DataType::kFloat32,
                      collective::ReduceOp::kSum, call),
      absl::StrCat("moving run ", options.run_id, "'s state at version ", v,
                   " to the new group")));
  const absl::Time moved = absl::Now();
  // 5. The run in the new group.
  options.total_workers = plan.total_workers;
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<SyncRun> run,
                            CreateSyncRun(tensors, options));
  if (run->layout.total_elements != elements) {
    return absl::DataLossError(absl::StrCat(
        "run ", options.run_id, "'s tensor table holds ",
        run->layout.total_elements, " parameters; its state ", elements));
  }
  STARLING_RETURN_IF_ERROR(InstallState(full, v, slots, *run));
  run->state_id = state_id;
  // 6. Every daemon moved it (else it is kept beside `from`).
  STARLING_RETURN_IF_ERROR(ConfirmMoved(from, run, comm, call));
  STARLING_LOG(INFO) << "run " << options.run_id << ": state at version " << v
                     << " moved: accounts, plan and table "
                     << absl::FormatDuration(moving - began) << ", "
                     << full.size() * sizeof(float) << " bytes all-reduced in "
                     << absl::FormatDuration(moved - moving)
                     << ", the run built in "
                     << absl::FormatDuration(absl::Now() - moved);
  *version = v;
  if (from_checkpoint != nullptr) *from_checkpoint = plan.checkpoint;
  return run;
}

absl::StatusOr<int64_t> ResumeFromCheckpoint(
    SyncRun& run, const CheckpointFolder& folder,
    const RunFactoryOptions& options, collective::Communicator* comm,
    const collective::CallOptions& call,
    std::optional<WholeVersion>* from_checkpoint) {
  // 1. The version every daemon sees whole (as a continuation's accounts).
  CarryAccount account;
  NoteDurable(folder, &account);
  STARLING_ASSIGN_OR_RETURN(
      const std::vector<CarryAccount> accounts,
      ExchangeAccounts(account, comm, call,
                       absl::StrCat("agreeing on ", folder.run_folder(),
                                    "'s newest checkpoint")));
  const std::vector<int> readers = CheckpointReaders(accounts);
  const std::optional<WholeVersion> agreed =
      AgreedCheckpoint(accounts, readers);
  if (from_checkpoint != nullptr) *from_checkpoint = agreed;
  if (!agreed.has_value()) return 0;  // from the initial parameters
  // 2. Each file read by one daemon and checked; every shard to every
  // daemon by one all-reduce, as a continuation moves them.
  const ResumePlan plan = CheckpointPlan(*agreed, readers);
  const uint64_t elements = run.layout.total_elements;
  STARLING_ASSIGN_OR_RETURN(const int slots, StateSlots(options));
  std::vector<float> full((1 + static_cast<size_t>(slots)) * elements, -0.0f);
  STARLING_RETURN_IF_ERROR(ReadCheckpoint(folder, plan, elements, slots,
                                          options, comm, call, &full));
  STARLING_RETURN_IF_ERROR(Annotate(
      comm->AllReduce(AsBytes(absl::MakeSpan(full)), DataType::kFloat32,
                      collective::ReduceOp::kSum, call),
      absl::StrCat("moving checkpoint version ", agreed->version,
                   " to every daemon")));
  STARLING_RETURN_IF_ERROR(InstallState(full, agreed->version, slots, run));
  return agreed->version;
}

ShardCheckpoint CheckpointOf(const SyncRun& run, int rank, int ranks,
                             uint64_t epoch, const std::string& optimizer) {
  ShardCheckpoint shard;
  shard.run_id = run.id;
  shard.version = run.master_version;
  shard.group_epoch = epoch;
  shard.rank = rank;
  shard.ranks = ranks;
  shard.elements = run.layout.total_elements;
  shard.optimizer = optimizer;
  const absl::Span<const float> state = run.optimizer->state();
  shard.state_slots = run.master.empty()
                          ? 0
                          : static_cast<int>(state.size() / run.master.size());
  std::vector<uint64_t> offsets;
  OwnLayout(run, &shard.ranges, &offsets);
  shard.master = run.master;
  shard.state.assign(state.begin(), state.end());
  return shard;
}

}  // namespace node
}  // namespace starling
