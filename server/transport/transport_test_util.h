// Test helpers shared by the stream transports' tests (testonly).
#ifndef STARLING_SERVER_TRANSPORT_TRANSPORT_TEST_UTIL_H_
#define STARLING_SERVER_TRANSPORT_TRANSPORT_TEST_UTIL_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

// Rank 0's half of a kill -9 test. `child` is a forked process that, as rank
// 1 of a group of 2, keeps writing into rank 0's region 1; `transport` is
// rank 0's (if it failed, the child is killed and the test fails). Registers
// region 1 of `region_bytes`, waits until a write has landed (mid-stream),
// SIGKILLs the child and expects waits on rank 1 to fail Unavailable naming
// it well within their deadline (under 5 s). Sets *wait_status to the child's
// waitpid() status. Failures are gtest failures.
void ExpectKilledPeerIsUnavailableWithinDeadline(
    absl::StatusOr<std::unique_ptr<Transport>> transport, pid_t child,
    size_t region_bytes, int* wait_status);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TRANSPORT_TEST_UTIL_H_
