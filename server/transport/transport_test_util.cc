#include "server/transport/transport_test_util.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstddef>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {

void ExpectKilledPeerIsUnavailableWithinDeadline(
    absl::StatusOr<std::unique_ptr<Transport>> transport, pid_t child,
    size_t region_bytes, int* wait_status) {
  auto soon = [] { return absl::Now() + absl::Seconds(10); };
  if (!transport.ok()) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    FAIL() << transport.status();
  }
  std::vector<std::byte> region(region_bytes);
  ASSERT_OK((*transport)->RegisterRegion(1, absl::MakeSpan(region)));
  // Mid-stream: writes are landing.
  ASSERT_OK((*transport)->WaitForWrite(WriteMatch{1, 1, {}}, soon()).status());
  ASSERT_EQ(kill(child, SIGKILL), 0);
  const absl::Time start = absl::Now();
  absl::Status status;
  while (status.ok()) {
    status = (*transport)->WaitForWrite(WriteMatch{1, 1, {}}, soon()).status();
  }
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::HasSubstr((*transport)->PeerName(1))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(waitpid(child, wait_status, 0), child);
}

}  // namespace transport
}  // namespace starling
