#include "server/node/ps/ps_continuation.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/collective/data_type.h"
#include "server/collective/shard_layout.h"
#include "server/node/ps/ps_engine.h"
#include "server/node/run/carry_exchange.h"
#include "server/node/run/float_bytes.h"
#include "server/transport/crc32c.h"

namespace starling {
namespace node {
namespace {

bool Joins(const PsAccount& a) { return a.old_rank < 0; }

int64_t Crc(absl::Span<const float> values, absl::Span<const float> state) {
  uint32_t crc =
      transport::Crc32c(values.data(), values.size() * sizeof(float));
  crc =
      transport::Crc32cExtend(crc, state.data(), state.size() * sizeof(float));
  return crc;
}

// One flat shard of `n` elements at `begin`: where it lies in the moved
// state (carry_exchange.h; its one part at offset {0}).
ShardRanges Range(size_t begin, size_t n) { return {{begin, begin + n}}; }

}  // namespace

std::vector<int64_t> PackPsAccount(const PsAccount& a) {
  return {a.run_id,      a.old_rank,        a.old_size,      a.updates,
          a.replica_of,  a.replica_updates, a.local_workers, a.elements,
          a.table_bytes, a.shard_crc,       a.replica_crc,   a.state_id};
}

PsAccount UnpackPsAccount(const int64_t* f) {
  PsAccount a;
  a.run_id = f[0];
  a.old_rank = f[1];
  a.old_size = f[2];
  a.updates = f[3];
  a.replica_of = f[4];
  a.replica_updates = f[5];
  a.local_workers = f[6];
  a.elements = f[7];
  a.table_bytes = f[8];
  a.shard_crc = f[9];
  a.replica_crc = f[10];
  a.state_id = f[11];
  return a;
}

PsAccount PsAccountOf(const PsRun* run, uint64_t run_id, int old_rank,
                      int old_size, int local_workers) {
  PsAccount a;
  a.local_workers = local_workers;
  if (run == nullptr) return a;  // it joins
  a.run_id = static_cast<int64_t>(run_id);
  a.old_rank = old_rank;
  a.old_size = old_size;
  a.elements = static_cast<int64_t>(run->layout.total_elements);
  a.table_bytes = static_cast<int64_t>(TableOf(*run).ByteSizeLong());
  a.state_id = static_cast<int64_t>(run->state_id);
  {
    absl::MutexLock lock(&run->mu);
    a.updates = run->updates;
    a.shard_crc = Crc(run->store->shard_parameters(), run->optimizer->state());
  }
  if (run->replica != nullptr) {
    const OwnerReplica& replica = *run->replica;
    absl::MutexLock lock(&replica.mu);
    a.replica_of = replica.of_rank;
    a.replica_updates = replica.updates;
    a.replica_crc = Crc(replica.parameters, replica.optimizer != nullptr
                                                ? replica.optimizer->state()
                                                : absl::Span<const float>());
  }
  return a;
}

absl::StatusOr<PsResumePlan> PlanPsResume(
    uint64_t run_id, const std::vector<PsAccount>& accounts, bool hogwild) {
  PsResumePlan plan;
  for (size_t r = 0; r < accounts.size(); ++r) {
    if (!Joins(accounts[r])) {
      plan.carrier = static_cast<int>(r);
      break;
    }
  }
  if (plan.carrier < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no daemon of the new group (", accounts.size(),
        ") holds state of run ", run_id,
        ": every one joins it; only the old group's survivors can carry it "
        "on"));
  }
  const PsAccount& first = accounts[plan.carrier];
  const int old_size = static_cast<int>(std::max<int64_t>(first.old_size, 0));
  plan.source.assign(old_size, -1);
  plan.from_replica.assign(old_size, false);
  plan.elements = first.elements;
  for (size_t r = 0; r < accounts.size(); ++r) {
    const PsAccount& a = accounts[r];
    plan.total_workers += static_cast<int>(a.local_workers);
    if (Joins(a)) {
      ++plan.joining;
      continue;
    }
    if (a.run_id != static_cast<int64_t>(run_id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " of the new group carries run ", a.run_id, ", not run ",
          run_id, ": the daemons disagree on the run that goes on"));
    }
    if (a.old_size != first.old_size || a.elements != first.elements ||
        a.old_rank >= a.old_size || plan.source[a.old_rank] >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the survivors disagree on run ", run_id, ": rank ", r,
          " was old rank ", a.old_rank, " of ", a.old_size, " with ",
          a.elements, " parameters; rank ", plan.carrier, " old rank ",
          first.old_rank, " of ", first.old_size, " with ", first.elements));
    }
    plan.source[a.old_rank] = static_cast<int>(r);
  }
  // The lost owners' shards from their buddies; survivors' replicas of
  // survivors checked against them.
  int distance = 0;
  for (size_t r = 0; r < accounts.size(); ++r) {
    const PsAccount& a = accounts[r];
    if (Joins(a) || a.replica_of < 0 || a.replica_of >= old_size) continue;
    distance = static_cast<int>((a.old_rank - a.replica_of + old_size) %
                                std::max(old_size, 1));
    const int owner = plan.source[a.replica_of];
    if (owner < 0 || plan.from_replica[a.replica_of]) {
      plan.source[a.replica_of] = static_cast<int>(r);
      plan.from_replica[a.replica_of] = true;
    } else if (!hogwild && accounts[owner].updates == a.replica_updates) {
      ++plan.checked;
      if (accounts[owner].shard_crc != a.replica_crc) {
        plan.mismatched.push_back(static_cast<int>(a.replica_of));
      }
    }
  }
  std::vector<std::string> missing;
  for (int o = 0; o < old_size; ++o) {
    if (plan.source[o] >= 0) continue;
    missing.push_back(
        distance > 0
            ? absl::StrCat("old rank ", o, "'s shard (its buddy, old rank ",
                           (o + distance) % old_size, ", was lost too)")
            : absl::StrCat("old rank ", o, "'s shard (no replicas)"));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("run ", run_id, " cannot go on: no survivor holds ",
                     absl::StrJoin(missing, "; ")));
  }
  for (int o = 0; o < old_size; ++o) {
    const PsAccount& a = accounts[plan.source[o]];
    plan.updates = std::max(
        plan.updates, plan.from_replica[o] ? a.replica_updates : a.updates);
  }
  return plan;
}

// --- PsEngine's continuation ------------------------------------------------

bool PsEngine::MayContinue(const Run& run, const absl::Status& why) const {
  if (static_cast<const PsRun&>(run).replica == nullptr) return false;
  return IsPeerLoss(why);
}

absl::StatusOr<std::shared_ptr<Run>> PsEngine::ContinueRun(
    const CarriedRun& carried, const RunFactoryOptions& given,
    const collective::CallOptions& call, int64_t* version) {
  const absl::Time began = absl::Now();
  RunFactoryOptions options = given;
  // 1. Every daemon's accounts of what it holds (its held state and an
  // unconfirmed one beside it: run/carry_exchange.h), and a nonce for the
  // new state's id.
  const HeldStates states =
      StatesOf(carried.run.get(), carried.old_rank, carried.old_size);
  const auto row = [&](const HeldState& h) {
    return PackPsAccount(PsAccountOf(static_cast<PsRun*>(h.run), options.run_id,
                                     h.rank, h.size, carried.local_workers));
  };
  uint64_t state_id = 0;
  STARLING_ASSIGN_OR_RETURN(
      const auto held,
      ExchangeHeld<PsAccount>(
          row(states.held), row(states.unconfirmed), UnpackPsAccount, comm_,
          call,
          absl::StrCat("exchanging the survivors' accounts of run ",
                       options.run_id),
          &state_id));
  // 2. Which state each daemon brings and the plan, alike on every daemon;
  // the tensors where a daemon joins.
  STARLING_ASSIGN_OR_RETURN(const auto choice,
                            (ChooseCarried<PsAccount, PsResumePlan>(
                                held,
                                [&](const std::vector<PsAccount>& accounts) {
                                  return PlanPsResume(options.run_id, accounts,
                                                      options_.hogwild);
                                },
                                [](const PsResumePlan&) { return true; })));
  const std::vector<PsAccount>& accounts = choice.accounts;
  const PsResumePlan& plan = choice.plan;
  const HeldState mine = states.Chosen(choice.which[comm_->rank()]);
  PsRun* const old = static_cast<PsRun*>(mine.run);
  STARLING_ASSIGN_OR_RETURN(const std::vector<proto::TensorSpec> tensors,
                            ShareTable(old, plan.joining > 0, plan.carrier,
                                       accounts[plan.carrier].table_bytes,
                                       options.run_id, comm_, call));
  if (!plan.mismatched.empty()) {
    metrics_->replica_mismatches->Increment(
        static_cast<double>(plan.mismatched.size()));
    STARLING_LOG(ERROR) << "run " << options.run_id << ": the replica of old "
                        << "rank(s) " << absl::StrJoin(plan.mismatched, ", ")
                        << " differs from its surviving owner at the same "
                        << "update count; the owner's shard is used";
  }
  // 3. What this daemon provides, into the full buffer.
  options.total_workers = plan.total_workers;
  const size_t elements = static_cast<size_t>(plan.elements);
  STARLING_ASSIGN_OR_RETURN(const int slots, StateSlots(options));
  std::vector<float> full((1 + static_cast<size_t>(slots)) * elements, -0.0f);
  if (old != nullptr) {
    const collective::ShardLayout shards(elements, mine.size);
    for (int o = 0; o < mine.size; ++o) {
      if (plan.source[o] != comm_->rank()) continue;
      const ShardRanges range = Range(shards.Begin(o), shards.Size(o));
      if (!plan.from_replica[o]) {
        absl::MutexLock lock(&old->mu);
        WriteShardState(range, {0}, old->store->shard_parameters(),
                        old->optimizer->state(), slots, elements, full);
      } else {
        const OwnerReplica& replica = *old->replica;
        absl::MutexLock lock(&replica.mu);
        WriteShardState(range, {0}, replica.parameters,
                        replica.optimizer != nullptr
                            ? replica.optimizer->state()
                            : absl::Span<const float>(),
                        slots, elements, full);
      }
    }
  }
  // 4. Every shard to every daemon, bit for bit (-0.0 is the identity).
  const absl::Time moving = absl::Now();
  STARLING_RETURN_IF_ERROR(
      Annotate(comm_->AllReduce(AsBytes(absl::MakeSpan(full)),
                                collective::DataType::kFloat32,
                                collective::ReduceOp::kSum, call),
               absl::StrCat("moving run ", options.run_id,
                            "'s shards to the new group")));
  const absl::Time moved = absl::Now();
  // 5. The run in the new group: its shard, its replica, the parameters.
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<Run> base,
                            CreateRun(tensors, options));
  PsRun& run = static_cast<PsRun&>(*base);
  if (run.layout.total_elements != elements) {
    return absl::DataLossError(absl::StrCat(
        "run ", options.run_id, "'s tensor table holds ",
        run.layout.total_elements, " parameters; its state ", elements));
  }
  const absl::Span<float> params = run.store->parameters();
  std::memcpy(params.data(), full.data(), elements * sizeof(float));
  std::vector<float> state;
  {
    absl::MutexLock lock(&run.mu);
    // (The shard's values are in the parameters copied above.)
    ReadShardState(Range(run.store->shard_begin(), run.store->shard_elements()),
                   {0}, full, slots, elements, run.store->shard_parameters(),
                   &state);
    STARLING_RETURN_IF_ERROR(run.optimizer->RestoreState(state));
    run.updates = plan.updates;
  }
  if (run.replica != nullptr) {
    OwnerReplica& replica = *run.replica;
    absl::MutexLock lock(&replica.mu);
    ReadShardState(Range(replica.begin, replica.elements), {0}, full, slots,
                   elements, absl::MakeSpan(replica.parameters), &state);
    if (replica.optimizer != nullptr) {
      STARLING_RETURN_IF_ERROR(replica.optimizer->RestoreState(state));
    }
    replica.updates = plan.updates;
    replica.ready = true;
  }
  run.state_id = state_id;
  // 6. Every daemon moved it (else it is kept beside `old`).
  STARLING_RETURN_IF_ERROR(ConfirmMoved(old, base, comm_, call));
  metrics_->run_continuations->Increment();
  std::vector<int> lost;
  for (int o = 0; o < static_cast<int>(plan.source.size()); ++o) {
    if (plan.from_replica[o]) lost.push_back(o);
  }
  STARLING_LOG(WARNING)
      << "run " << options.run_id << ": shards moved ("
      << (lost.empty() ? std::string("none lost")
                       : absl::StrCat("old rank(s) ", absl::StrJoin(lost, ", "),
                                      " from their buddies"))
      << ", " << plan.checked << " replica(s) checked against "
      << "their owners, " << plan.mismatched.size() << " differing; "
      << plan.joining << " daemon(s) joining)"
      << ": accounts, plan and table " << absl::FormatDuration(moving - began)
      << ", " << full.size() * sizeof(float) << " bytes all-reduced in "
      << absl::FormatDuration(moved - moving) << ", the run built in "
      << absl::FormatDuration(absl::Now() - moved) << "; every shard at update "
      << plan.updates;
  // The shard owners keep no step: each worker goes on from its own count;
  // round-robin's turns count updates from here.
  *version = options_.round_robin ? plan.updates : 0;
  return base;
}

void PsEngine::RunContinued(const std::shared_ptr<Run>& run, int64_t) {
  absl::MutexLock lock(&mu_);
  run_ = std::static_pointer_cast<PsRun>(run);
  run_changed_.SignalAll();
}

}  // namespace node
}  // namespace starling
