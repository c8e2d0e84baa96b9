// What the engines' continuations (sync/continuation.h, ps/ps_continuation.h)
// share when a run goes on in a re-formed group: every daemon's account as
// a row of small integers, and the run's tensor table sent to the daemons
// that join it (they carry no state), each one all-reduce on the new
// group's communicator; and the layout of the state they move: one buffer
// of the whole flat vector, then each optimizer state slot's whole vector.
//
// Free functions of their arguments: thread-compatible; they block in
// collectives bounded by `call`.
#ifndef STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
#define STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"
#include "server/collective/communicator.h"
#include "server/node/run/run.h"
#include "server/node/run/run_factory.h"

namespace starling {
namespace node {

// Every rank's `row` (as many values on every rank), in rank order: each
// rank fills its own row of a table of zeros, summed by one all-reduce.
// The collective's error, annotated with `what`.
absl::StatusOr<std::vector<int64_t>> ExchangeRows(
    const std::vector<int64_t>& row, collective::Communicator* comm,
    const collective::CallOptions& call, const std::string& what);

// --- Which state a continuation goes on from ------------------------------
//
// The state moves in one collective that may end on some daemons and fail
// on others (a member lost at its end). So after its move each daemon
// confirms (ConfirmMoved: one more all-reduce); the first that confirms
// knows every daemon of the group moved the state. A daemon whose move
// ended but whose confirmation did not keeps the new state beside the one
// it came from (Run::successor). So where some daemon holds an unconfirmed
// state X and another carrier holds no state X, no daemon took X for
// confirmed, and every carrier still holds the state X came from: the next
// plan takes a state every carrier holds (ChooseCarried), and survivors
// never go on from states of two different groups.

// A state of the run this daemon holds, and its place in the group that
// made it (run null: none).
struct HeldState {
  Run* run = nullptr;
  int rank = -1;
  int size = 0;
};

// What this daemon brings: the state its last serving group handed over
// (`carried` as rank `rank` of `size`; null: none, it joins) and an
// unconfirmed later one beside it, if any: the last two of the chain
// carried -> successor -> ...
struct HeldStates {
  HeldState held;
  HeldState unconfirmed;
  // CarryChoice::which's state: 0 held, 1 unconfirmed, -1 none.
  HeldState Chosen(int which) const {
    return which == 0 ? held : which == 1 ? unconfirmed : HeldState();
  }
};
HeldStates StatesOf(Run* carried, int rank, int size);

// After `run` (this continuation's, made here as rank comm->rank()) took
// the moved state: every daemon says so (an all-reduce). Not confirmed
// here, `run` is kept as the successor of `mine` (the state it came from;
// null: this daemon joined, and `run` is dropped), and the collective's
// error returned, annotated.
absl::Status ConfirmMoved(Run* mine, std::shared_ptr<Run> run,
                          collective::Communicator* comm,
                          const collective::CallOptions& call);

// Every daemon's packed accounts of its held and its unconfirmed state
// (`held` and `unconfirmed`, as many integers each, on every daemon),
// exchanged with a random nonce each (ExchangeRows): the rows in rank
// order, each the two accounts (2 * held.size() integers), and in
// `*state_id` the id of the state this continuation makes, from the
// nonces (the same on every daemon, another in every continuation).
absl::StatusOr<std::vector<int64_t>> ExchangeHeldRows(
    const std::vector<int64_t>& held, const std::vector<int64_t>& unconfirmed,
    collective::Communicator* comm, const collective::CallOptions& call,
    const std::string& what, uint64_t* state_id);

// ExchangeHeldRows, each daemon's pair of accounts unpacked by
// `unpack(const int64_t*) -> Account`, in rank order.
template <typename Account, typename Unpack>
absl::StatusOr<std::vector<std::pair<Account, Account>>> ExchangeHeld(
    const std::vector<int64_t>& held, const std::vector<int64_t>& unconfirmed,
    const Unpack& unpack, collective::Communicator* comm,
    const collective::CallOptions& call, const std::string& what,
    uint64_t* state_id) {
  absl::StatusOr<std::vector<int64_t>> table =
      ExchangeHeldRows(held, unconfirmed, comm, call, what, state_id);
  if (!table.ok()) return table.status();
  std::vector<std::pair<Account, Account>> pairs;
  for (int r = 0; r < comm->size(); ++r) {
    const int64_t* f = table->data() + 2 * held.size() * r;
    pairs.emplace_back(unpack(f), unpack(f + held.size()));
  }
  return pairs;
}

// Which state each daemon brings (index = new rank; 0: its held one, 1:
// its unconfirmed one, -1: none, it joins), their accounts and the plan
// from them.
template <typename Account, typename Plan>
struct CarryChoice {
  std::vector<int> which;
  std::vector<Account> accounts;
  Plan plan;
};

// The choice from every daemon's accounts of its held and unconfirmed
// states (Account: old_rank, -1 for none; state_id; local_workers): a
// state every carrier holds, the newest first (an unconfirmed one before
// a held one), for which `plan(accounts)` succeeds and `in_memory(plan)`
// (not from a durable checkpoint), else the first such state's plan or
// error; a daemon holding only a newer state joins. Where no state is held
// by every carrier, the plan on the held ones (it names the disagreement).
template <typename Account, typename Plan, typename PlanFn, typename InMemory>
absl::StatusOr<CarryChoice<Account, Plan>> ChooseCarried(
    const std::vector<std::pair<Account, Account>>& held, const PlanFn& plan,
    const InMemory& in_memory) {
  const auto none = [](const Account& a) { return a.old_rank < 0; };
  const auto carries = [&](const std::pair<Account, Account>& h) {
    return !none(h.first) || !none(h.second);
  };
  const auto holds = [&](const std::pair<Account, Account>& h, int64_t id) {
    return (!none(h.first) && h.first.state_id == id) ||
           (!none(h.second) && h.second.state_id == id);
  };
  std::vector<int64_t> ids;
  const auto consider = [&](int64_t id) {
    if (std::find(ids.begin(), ids.end(), id) != ids.end()) return;
    for (const auto& h : held) {
      if (carries(h) && !holds(h, id)) return;
    }
    ids.push_back(id);
  };
  for (const auto& h : held) {
    if (!none(h.second)) consider(h.second.state_id);
  }
  for (const auto& h : held) {
    if (!none(h.first)) consider(h.first.state_id);
  }
  const auto choose = [&](const int64_t* id) {
    CarryChoice<Account, Plan> choice;
    for (const auto& h : held) {
      if (id == nullptr || (!none(h.first) && h.first.state_id == *id)) {
        choice.which.push_back(none(h.first) ? -1 : 0);
        choice.accounts.push_back(h.first);
      } else if (!none(h.second) && h.second.state_id == *id) {
        choice.which.push_back(1);
        choice.accounts.push_back(h.second);
      } else {
        Account joins;
        joins.local_workers = h.first.local_workers;
        choice.which.push_back(-1);
        choice.accounts.push_back(joins);
      }
    }
    return choice;
  };
  if (ids.empty()) {
    CarryChoice<Account, Plan> choice = choose(nullptr);
    absl::StatusOr<Plan> p = plan(choice.accounts);
    if (!p.ok()) return p.status();
    choice.plan = *std::move(p);
    return choice;
  }
  std::optional<absl::StatusOr<CarryChoice<Account, Plan>>> first;
  for (const int64_t& id : ids) {
    CarryChoice<Account, Plan> choice = choose(&id);
    absl::StatusOr<Plan> p = plan(choice.accounts);
    if (p.ok()) {
      choice.plan = *std::move(p);
      if (in_memory(choice.plan)) return choice;
      if (!first.has_value()) first = std::move(choice);
    } else if (!first.has_value()) {
      first = p.status();
    }
  }
  return *std::move(first);
}

// The run's tensors in declaration order.
proto::TensorTable TableOf(const Run& run);

// The run's tensors on every daemon: from `old` (this daemon's state of the
// run; null where it joins) when no daemon joins, otherwise sent by rank
// `source` of the new group (a daemon that carries the run) as the
// table's `table_bytes` bytes in 8-byte words, written into zeros and
// summed. DataLoss when what arrived does not parse.
absl::StatusOr<std::vector<proto::TensorSpec>> ShareTable(
    const Run* old, bool anyone_joins, int source, int64_t table_bytes,
    uint64_t run_id, collective::Communicator* comm,
    const collective::CallOptions& call);

// Slots of optimizer state per element of the run's optimizer, alike on
// every daemon (asked of an optimizer of one element: a shard may be
// empty).
absl::StatusOr<int> StateSlots(const RunFactoryOptions& options);

// A shard's place in the moved state: `ranges` [begin, end) of the flat
// vector, part k at `offsets[k]` of the shard's own values (and of each
// state slot, `values.size()` long).
using ShardRanges = std::vector<std::pair<uint64_t, uint64_t>>;

// Writes a shard's `values` and optimizer `state` (slot by slot) into
// `full`, the moved state of `elements` parameters and `slots` state slots.
void WriteShardState(const ShardRanges& ranges,
                     const std::vector<uint64_t>& offsets,
                     absl::Span<const float> values,
                     absl::Span<const float> state, int slots,
                     uint64_t elements, std::vector<float>& full);

// Reads a shard's values and its state (`*state`, slot by slot) out of
// `full`.
void ReadShardState(const ShardRanges& ranges,
                    const std::vector<uint64_t>& offsets,
                    const std::vector<float>& full, int slots,
                    uint64_t elements, absl::Span<float> values,
                    std::vector<float>* state);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_CARRY_EXCHANGE_H_
