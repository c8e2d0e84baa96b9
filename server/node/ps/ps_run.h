// PsRun: a run of the shard owners (PsEngine, ps_engine.h): the Run every
// mode has, the count of updates applied to this daemon's shard, and the
// replica this daemon keeps of another rank's shard.
//
// Replica (PsEngineOptions::buddy_distance d > 0, more than one rank):
// this rank is the buddy of rank r - d (mod N) and keeps a replica of that
// rank's shard and optimizer state; rank r + d keeps this rank's. Every
// update an owner applies (update number u, counted from 1 in the order
// it applied them under the run's `mu`) is sent to its buddy, which
// applies the same optimizer to its replica in the same order, before the
// owner answers the push: when a worker is told its push is applied, every
// owner's part of it exists on two daemons (ps_wire_format.md,
// "replicate"). The same code on the same inputs in the same order: the
// replica equals its owner bit for bit at equal update counts (Hogwild
// owners add without the lock, so theirs may differ in the last bits where
// two additions raced). A run that goes on after a daemon is lost takes
// that daemon's shard from its buddy (ps_continuation.h).
//
// Thread safety: `updates` and the shard under `mu`; the replica under its
// own `mu` (the buddy's replica thread applies, the continuation reads once
// the engine stopped).
#ifndef STARLING_SERVER_NODE_PS_PS_RUN_H_
#define STARLING_SERVER_NODE_PS_PS_RUN_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/node/run/run.h"
#include "server/shard/optimizer/optimizer.h"

namespace starling {
namespace node {

// The replica a buddy keeps of rank `of_rank`'s shard.
struct OwnerReplica {
  int of_rank = -1;
  // Its range of the flat vector.
  size_t begin = 0;
  size_t elements = 0;
  // The owner's optimizer, alike (null for Hogwild, which adds).
  std::unique_ptr<shard::Optimizer> optimizer;

  // An update that arrived ahead of one it follows (the owner's threads
  // send in any order), or in parts: held until it is whole and next.
  struct Pending {
    std::vector<float> values;
    size_t received_bytes = 0;
    uint64_t request_id = 0;
    uint32_t reply_tag = 0;
  };

  mutable absl::Mutex mu;
  // Set once `parameters` hold the run's initial (or continued) values;
  // updates wait for it.
  bool ready ABSL_GUARDED_BY(mu) = false;
  std::vector<float> parameters ABSL_GUARDED_BY(mu);
  // The owner's updates applied here.
  int64_t updates ABSL_GUARDED_BY(mu) = 0;
  std::map<int64_t, Pending> pending ABSL_GUARDED_BY(mu);
  // The values of a whole update that arrived next in line (reused).
  std::vector<float> next ABSL_GUARDED_BY(mu);
};

struct PsRun : Run {
  // Pushes applied to this daemon's shard; held while the optimizer
  // updates it (but for hogwild) and while a pull copies it.
  mutable absl::Mutex mu;
  int64_t updates ABSL_GUARDED_BY(mu) = 0;
  // The rank that keeps this shard's replica (-1: none), and the replica
  // this rank keeps (null: none).
  int buddy = -1;
  std::unique_ptr<OwnerReplica> replica;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_PS_PS_RUN_H_
