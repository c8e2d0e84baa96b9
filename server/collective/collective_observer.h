// CollectiveObserver: what a Communicator tells about each op as it runs, so
// that its owner can export metrics and answer "which collective is stuck,
// and which ranks has it not heard from" while the op is still waiting.
//
// Every op carries its sequence number and its fingerprint (the descriptor:
// op, dtype, element count, algorithm, root), sent at the op's start to the
// peers it exchanges data with, and to every peer once one of its waits
// lasts OpContext::kArrivalPollInterval (op_context.h). A peer has *arrived*
// at op `seq` once its descriptor for `seq` has reached this rank; in a fast
// op, that is only the partners. The calls for one op come in order
// OpStarted, PeerArrived (once per peer that arrived, possibly none),
// OpEnded, all on the thread running the op; the observer must be
// thread-safe against its own readers (an admin RPC, a scrape) and must not
// block.
#ifndef STARLING_SERVER_COLLECTIVE_COLLECTIVE_OBSERVER_H_
#define STARLING_SERVER_COLLECTIVE_COLLECTIVE_OBSERVER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

// How the ranks arrived at one op, as this rank saw it. A peer whose
// descriptor was already waiting when this rank started counts as having
// arrived at this rank's start: this rank was then later than it.
struct ArrivalSummary {
  // The rank that arrived last (this rank's own, when every peer's
  // descriptor was already here at its start), among the ranks heard from
  // when the op succeeded; -1 when the op failed before every peer arrived
  // or the group has one rank.
  int last_rank = -1;
  // From this rank's start to the last rank's arrival (zero when this rank
  // was last): how long this rank waited for the slowest one.
  absl::Duration skew = absl::ZeroDuration();
};

class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;

  // Op `desc.seq` started on this rank at `start`; `bytes` is the caller's
  // buffer size.
  virtual void OpStarted(const OpDescriptor& desc, uint64_t bytes,
                         absl::Time start) = 0;
  // `peer`'s descriptor for op `seq` was seen at `when`.
  virtual void PeerArrived(uint64_t seq, int peer, absl::Time when) = 0;
  // The op ended with `status` after `duration`.
  virtual void OpEnded(const OpDescriptor& desc, uint64_t bytes,
                       const absl::Status& status, absl::Duration duration,
                       const ArrivalSummary& arrival) = 0;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_COLLECTIVE_OBSERVER_H_
