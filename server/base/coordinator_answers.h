// Words of the coordinator's answers that a node acts on (server/coordinator
// writes them, server/node/link reads them). Constants; thread-safe.
#ifndef STARLING_SERVER_BASE_COORDINATOR_ANSWERS_H_
#define STARLING_SERVER_BASE_COORDINATOR_ANSWERS_H_

#include "absl/strings/string_view.h"

namespace starling {

// In the DEADLINE_EXCEEDED answer to a Join held while the running group's
// run went on: the group takes the node in once the run ends, and the node
// asks again (it is not the coordinator being unreachable).
inline constexpr absl::string_view kTakenInBetweenRuns =
    "takes new nodes between runs";

}  // namespace starling

#endif  // STARLING_SERVER_BASE_COORDINATOR_ANSWERS_H_
