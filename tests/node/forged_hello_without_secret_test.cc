// A stranger on the same host that, before the real rank 2 starts, goes
// through the whole handshake with ranks 0 and 1 as "rank 2" of a group
// without a cluster secret (HELLO, CHALLENGE in mode "no secret"). Issue
// #7 asks that a forged HELLO be refused and logged and the real rank be
// unaffected: the group forms with the real rank 2 within a few seconds,
// every node stays healthy and a short run trains bit-identical.
// (frame_format.md says that without a secret anyone on the host can claim
// a rank; this test holds the requirement against it.)
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/transport/auth.h"
#include "tests/node/formation_strangers.h"
#include "tests/node/node_cluster.h"

namespace starling {
namespace testing_node {
namespace {

using transport::AuthMode;

TEST(ForgedHelloWithoutSecret, DoesNotTakeTheRealRanksPlace) {
  NodeCluster cluster(FormationOptions());
  cluster.StartCoordinator();
  cluster.StartDaemon(0, {});
  cluster.StartDaemon(1, {});
  ASSERT_TRUE(WaitForJoined(cluster, 2)) << cluster.ServerLogs();
  Stranger forged0(cluster.data_port(0)), forged1(cluster.data_port(1));
  ASSERT_TRUE(forged0.connected() && forged1.connected());
  ASSERT_TRUE(forged0.Send(
      ForgedOpening(2, 0, kFormationDaemons, AuthMode::kNone, nullptr)));
  ASSERT_TRUE(forged1.Send(
      ForgedOpening(2, 1, kFormationDaemons, AuthMode::kNone, nullptr)));

  const absl::Time start = absl::Now();
  cluster.StartDaemon(2, {});
  ASSERT_TRUE(WaitForServing(cluster, absl::Seconds(8)))
      << "the group did not form with the real rank 2\n"
      << cluster.ServerLogs();
  EXPECT_LT(absl::Now() - start, kFormationBound);
  ExpectHealthyGroup(cluster);
  ExpectTrainingBitIdentical(cluster, {"--steps=20", "--timeout=20s"},
                             absl::Seconds(30));
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
