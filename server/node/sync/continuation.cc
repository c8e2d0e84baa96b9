#include "server/node/sync/continuation.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/status_macros.h"
#include "server/collective/data_type.h"
#include "server/node/run/float_bytes.h"

namespace starling {
namespace node {
namespace {

using collective::DataType;

std::vector<int64_t> Pack(const CarryAccount& a) {
  return {a.run_id,           a.old_rank,      a.old_size,
          a.master_version,   a.replica_of,    a.replica_version,
          a.gradient_version, a.local_workers, a.elements};
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
  return a;
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
  const int old_size = static_cast<int>(accounts[0].old_size);
  plan->version = v;
  plan->source.assign(old_size, -1);
  plan->from_replica.assign(old_size, false);
  bool ok = true;
  for (size_t r = 0; r < accounts.size(); ++r) {
    const CarryAccount& a = accounts[r];
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

// Slots of optimizer state per element of the run's optimizer, alike on
// every daemon (asked of an optimizer of one element: a shard may be empty).
absl::StatusOr<int> StateSlots(const RunFactoryOptions& options) {
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<shard::Optimizer> one,
                            CreateRunOptimizer(options, 1, 1));
  return static_cast<int>(one->state().size());
}

// Writes `values` (a shard laid out in bucket order: part k at `offsets`)
// and its state into the full buffer.
void WriteShard(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
                const std::vector<uint64_t>& offsets,
                const std::vector<float>& values, absl::Span<const float> state,
                int slots, uint64_t elements, std::vector<float>& full) {
  const size_t n = values.size();
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [begin, end] = ranges[k];
    const size_t count = end - begin;
    std::memcpy(full.data() + begin, values.data() + offsets[k],
                count * sizeof(float));
    for (int s = 0; s < slots; ++s) {
      std::memcpy(full.data() + (1 + s) * elements + begin,
                  state.data() + s * n + offsets[k], count * sizeof(float));
    }
  }
}

// Reads a shard and its state out of the full buffer.
void ReadShard(const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
               const std::vector<uint64_t>& offsets,
               const std::vector<float>& full, int slots, uint64_t elements,
               std::vector<float>& values, std::vector<float>& state) {
  const size_t n = values.size();
  state.assign(static_cast<size_t>(slots) * n, 0.0f);
  for (size_t k = 0; k < ranges.size(); ++k) {
    const auto [begin, end] = ranges[k];
    const size_t count = end - begin;
    std::memcpy(values.data() + offsets[k], full.data() + begin,
                count * sizeof(float));
    for (int s = 0; s < slots; ++s) {
      std::memcpy(state.data() + s * n + offsets[k],
                  full.data() + (1 + s) * elements + begin,
                  count * sizeof(float));
    }
  }
}

void OwnLayout(const SyncRun& run,
               std::vector<std::pair<uint64_t, uint64_t>>* ranges,
               std::vector<uint64_t>* offsets) {
  for (const Bucket& b : run.buckets) {
    ranges->emplace_back(b.owned_begin, b.owned_end);
    offsets->push_back(b.master_offset);
  }
}

void ReplicaLayout(const ShardReplica& replica,
                   std::vector<std::pair<uint64_t, uint64_t>>* ranges,
                   std::vector<uint64_t>* offsets) {
  for (const ShardReplica::Part& p : replica.parts) {
    ranges->emplace_back(p.begin, p.end);
    offsets->push_back(p.offset);
  }
}

}  // namespace

CarryAccount AccountOf(const SyncRun* run, uint64_t run_id, int old_rank,
                       int old_size, int local_workers) {
  CarryAccount a;
  a.local_workers = local_workers;
  a.old_rank = old_rank;
  a.old_size = old_size;
  if (run == nullptr) return a;
  a.run_id = static_cast<int64_t>(run_id);
  a.master_version = run->master_version;
  a.elements = static_cast<int64_t>(run->layout.total_elements);
  if (run->replica != nullptr) {
    a.replica_of = run->replica->of_rank;
    a.replica_version = run->replica->version;
    a.gradient_version = run->replica->gradient_version;
  }
  return a;
}

absl::StatusOr<ResumePlan> PlanResume(
    uint64_t run_id, const std::vector<CarryAccount>& accounts) {
  if (accounts.empty()) {
    return absl::FailedPreconditionError("no daemon carries the run");
  }
  int total_workers = 0;
  int64_t newest = 0;
  const CarryAccount& first = accounts[0];
  std::vector<bool> seen(std::max<int64_t>(first.old_size, 0), false);
  for (size_t r = 0; r < accounts.size(); ++r) {
    const CarryAccount& a = accounts[r];
    total_workers += static_cast<int>(a.local_workers);
    if (a.run_id != static_cast<int64_t>(run_id)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " of the new group holds no state of run ", run_id,
          a.run_id != 0 ? absl::StrCat(" (it carries run ", a.run_id, ")")
                        : std::string(),
          ": only the old group's survivors can carry it on"));
    }
    if (a.old_size != first.old_size || a.elements != first.elements ||
        a.old_rank < 0 || a.old_rank >= a.old_size || seen[a.old_rank]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the survivors disagree on run ", run_id, ": rank ", r,
          " was old rank ", a.old_rank, " of ", a.old_size, " with ",
          a.elements, " parameters; rank 0 old rank ", first.old_rank, " of ",
          first.old_size, " with ", first.elements));
    }
    seen[a.old_rank] = true;
    newest = std::max(newest, a.master_version);
  }
  ResumePlan plan;
  std::vector<std::string> missing_newest;
  if (PlanAt(accounts, newest, &plan, &missing_newest)) {
    plan.total_workers = total_workers;
    plan.newest = newest;
    return plan;
  }
  std::vector<std::string> missing;
  if (newest > 0 && PlanAt(accounts, newest - 1, &plan, &missing)) {
    plan.total_workers = total_workers;
    plan.newest = newest;
    return plan;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "run ", run_id, " cannot go on: no survivor holds ",
      absl::StrJoin(missing.empty() ? missing_newest : missing, "; "),
      " at version ", newest,
      newest > 0 ? absl::StrCat(" or ", newest - 1) : "",
      " (a rank and its buddy lost together)"));
}

absl::StatusOr<std::shared_ptr<SyncRun>> ContinueRun(
    const std::shared_ptr<SyncRun>& carried, int old_rank, int old_size,
    int local_workers, RunFactoryOptions options,
    collective::Communicator* comm, const collective::CallOptions& call,
    int64_t* version) {
  const int size = comm->size();
  const int rank = comm->rank();
  // 1. Every daemon's account.
  std::vector<int64_t> table(static_cast<size_t>(size) * CarryAccount::kFields,
                             0);
  const std::vector<int64_t> mine = Pack(AccountOf(
      carried.get(), options.run_id, old_rank, old_size, local_workers));
  std::copy(mine.begin(), mine.end(),
            table.begin() + static_cast<size_t>(rank) * CarryAccount::kFields);
  STARLING_RETURN_IF_ERROR(Annotate(
      comm->AllReduce(
          absl::Span<std::byte>(reinterpret_cast<std::byte*>(table.data()),
                                table.size() * sizeof(int64_t)),
          DataType::kInt64, collective::ReduceOp::kSum, call),
      absl::StrCat("exchanging the survivors' accounts of run ",
                   options.run_id)));
  std::vector<CarryAccount> accounts;
  for (int r = 0; r < size; ++r) {
    accounts.push_back(Unpack(table.data() + r * CarryAccount::kFields));
  }
  // 2. The plan, alike on every daemon.
  STARLING_ASSIGN_OR_RETURN(ResumePlan plan,
                            PlanResume(options.run_id, accounts));
  SyncRun& old = *carried;  // the plan holds: every daemon carries it
  const int64_t v = plan.version;
  const uint64_t elements = old.layout.total_elements;
  STARLING_ASSIGN_OR_RETURN(const int slots, StateSlots(options));
  // 3. This daemon's shards at v.
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
  std::vector<float> full((1 + static_cast<size_t>(slots)) * elements, -0.0f);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<uint64_t> offsets;
  OwnLayout(old, &ranges, &offsets);
  WriteShard(ranges, offsets, old.master, old.optimizer->state(), slots,
             elements, full);
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
    WriteShard(ranges, offsets, replica.master, replica.optimizer->state(),
               slots, elements, full);
  }
  // 4. Every shard to every daemon, bit for bit (-0.0 is the identity).
  STARLING_RETURN_IF_ERROR(Annotate(
      comm->AllReduce(AsBytes(absl::MakeSpan(full)), DataType::kFloat32,
                      collective::ReduceOp::kSum, call),
      absl::StrCat("moving run ", options.run_id, "'s state at version ", v,
                   " to the new group")));
  // 5. The run in the new group.
  std::vector<proto::TensorSpec> tensors;
  for (const TensorLayout::Entry& entry : old.layout.tensors) {
    tensors.push_back(entry.spec);
  }
  options.total_workers = plan.total_workers;
  STARLING_ASSIGN_OR_RETURN(std::shared_ptr<SyncRun> run,
                            CreateSyncRun(tensors, options));
  std::vector<float> state;
  ranges.clear();
  offsets.clear();
  OwnLayout(*run, &ranges, &offsets);
  ReadShard(ranges, offsets, full, slots, elements, run->master, state);
  STARLING_RETURN_IF_ERROR(run->optimizer->RestoreState(state));
  run->master_version = v;
  if (run->replica != nullptr) {
    ShardReplica& replica = *run->replica;
    ranges.clear();
    offsets.clear();
    ReplicaLayout(replica, &ranges, &offsets);
    ReadShard(ranges, offsets, full, slots, elements, replica.master, state);
    STARLING_RETURN_IF_ERROR(replica.optimizer->RestoreState(state));
    replica.version = v;
  }
  absl::Span<float> params = run->store->parameters();
  if (run->wire == DataType::kFloat32) {
    std::memcpy(params.data(), full.data(), elements * sizeof(float));
  } else {
    // What the all-gather of version v left: the master narrowed.
    collective::FromFloat32(run->wire, full.data(), run->wire16.data(),
                            elements);
    collective::ToFloat32(run->wire, run->wire16.data(), params.data(),
                          elements);
  }
  *version = v;
  return run;
}

}  // namespace node
}  // namespace starling
