// Continuation of a shard owners' run (PsEngine: parameter server and the
// asynchronous EASGD variants) in a group re-formed without
// some of its daemons, or with a daemon that joins it (DESIGN.md
// "Failure").
//
// What each survivor holds when its run stopped (ps_run.h): its shard and
// optimizer state after `updates` updates, and the replica of rank r - d's
// at the replica's count. A push is answered only once every owner's part
// of it is applied on the owner and on its buddy, so every acknowledged
// push is in both. Unlike the synchronous step there is no version to
// agree on: each old shard is taken as its owner left it, or, where the
// owner was lost, as its buddy's replica holds it (which may miss only
// updates nobody was told were applied). Both a rank and its buddy lost:
// that shard has no copy, and the run cannot go on (FailedPrecondition
// naming both).
//
// Where an owner and its buddy both survive with equal update counts, the
// replica is checked against its owner (a CRC-32C of the values and state
// in each account): every such pair must match bit for bit (but Hogwild's,
// whose owners add without a lock); a mismatch is logged and counted, and
// the owner's copy is the one used.
//
// The exchange on the new group's communicator: every daemon's account (a
// row of small integers), the plan (each computes the same), the tensor
// table where a daemon joins, then one all-reduce of the whole parameter
// vector and optimizer state, each value written by exactly one daemon and
// -0.0 by the others (x + -0.0 == x for every float, so the sum moves the
// values bit for bit), from which each daemon takes its new shard, its new
// buddy's replica and the parameters. Every shard goes on at the largest
// update count among the old shards (the optimizer's step number).
//
// Round-robin EASGD goes on with its turns counted from that update count:
// the continuation's version, which the workers' exchanges after it number
// from (Client::Rejoined::group_version), in the new group's worker order.
//
// Thread-compatible: the regroup thread owns the runs it is handed.
#ifndef STARLING_SERVER_NODE_PS_PS_CONTINUATION_H_
#define STARLING_SERVER_NODE_PS_PS_CONTINUATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/node/ps/ps_run.h"

namespace starling {
namespace node {

// One daemon's account of the shard owners' run it carries.
struct PsAccount {
  int64_t run_id = 0;     // 0: carries no state of it (it joins)
  int64_t old_rank = -1;  // -1: it joins
  int64_t old_size = 0;
  int64_t updates = 0;
  int64_t replica_of = -1;  // old rank; -1: no replica
  int64_t replica_updates = 0;
  int64_t local_workers = 0;
  int64_t elements = 0;  // the run's flat vector (all must agree)
  int64_t table_bytes = 0;
  // CRC-32C of the shard's values then its optimizer state, and of the
  // replica's.
  int64_t shard_crc = 0;
  int64_t replica_crc = 0;
  // Which state of the run it holds (Run::state_id).
  int64_t state_id = 0;
  static constexpr int kFields = 12;
};

// `run` as rank `old_rank` of `old_size` held it; null: this daemon joins.
// Reads the shard under the run's locks.
PsAccount PsAccountOf(const PsRun* run, uint64_t run_id, int old_rank,
                      int old_size, int local_workers);

std::vector<int64_t> PackPsAccount(const PsAccount& a);
PsAccount UnpackPsAccount(const int64_t* fields);

struct PsResumePlan {
  // Index = old rank: the new rank that provides that shard, and whether
  // from its replica (the owner was lost).
  std::vector<int> source;
  std::vector<bool> from_replica;
  // The update count every shard goes on at.
  int64_t updates = 0;
  int total_workers = 0;
  int64_t elements = 0;
  int joining = 0;
  // The first daemon that carries the run (it sends the tensor table).
  int carrier = -1;
  // Replicas checked against their surviving owners, and the old ranks
  // whose replica did not match.
  int checked = 0;
  std::vector<int> mismatched;
};

// The plan every daemon computes alike from the accounts (index = new
// rank). `hogwild`: replicas are not checked. FailedPrecondition when no
// daemon carries the run, the accounts disagree on the run, the old group
// or the model, or an old shard has no copy (naming the old ranks).
absl::StatusOr<PsResumePlan> PlanPsResume(
    uint64_t run_id, const std::vector<PsAccount>& accounts, bool hogwild);

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_PS_PS_CONTINUATION_H_
