// FormatInFlightTable: what `starlingctl inflight` prints, from the job's
// status (the coordinator's) and each node daemon's GetCollectives answer:
// per rank the collective it runs (sequence number, fingerprint, for how
// long, which ranks it has not heard from) or, when it runs none, the last
// one it finished; then, for every op some rank waits in, one line that
// says who is missing: the ranks that have not arrived and what each of
// them is doing instead (in an earlier op, in no op, unreachable).
// Stateless; thread-safe.
#ifndef STARLING_SERVER_COORDINATOR_INFLIGHT_TABLE_H_
#define STARLING_SERVER_COORDINATOR_INFLIGHT_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/coordinator.pb.h"
#include "proto/node_admin.pb.h"

namespace starling {
namespace coordinator {

// One node's answer (or why there is none).
struct NodeCollectives {
  int rank = -1;
  std::string hostname;
  std::string admin_address;
  absl::StatusOr<proto::CollectivesReply> reply;
};

// Ends in '\n'. `nodes` in rank order.
std::string FormatInFlightTable(const proto::JobStatus& job,
                                const std::vector<NodeCollectives>& nodes);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_INFLIGHT_TABLE_H_
