// The plan a shard owners' run goes on by (ps_continuation.h): each old
// shard from its owner, or from its buddy's replica where the owner was
// lost; a shard with no copy named; replicas checked against surviving
// owners; the daemons' accounts travel as rows of integers unchanged.
#include "server/node/ps/ps_continuation.h"

#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/node/run/carry_exchange.h"

namespace starling {
namespace node {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kRun = 7;

// Old rank `old_rank` of `old_size`, its replica of rank - 1 (distance 1),
// with `updates` on both and the same CRCs for equal contents.
PsAccount Survivor(int old_rank, int old_size, int64_t updates) {
  PsAccount a;
  a.run_id = kRun;
  a.old_rank = old_rank;
  a.old_size = old_size;
  a.updates = updates;
  a.replica_of = (old_rank + old_size - 1) % old_size;
  a.replica_updates = updates;
  a.local_workers = 2;
  a.elements = 1000;
  a.table_bytes = 40;
  a.shard_crc = 100 + old_rank;
  a.replica_crc = 100 + a.replica_of;
  return a;
}

PsAccount Joiner() {
  PsAccount a;
  a.local_workers = 1;
  return a;
}

TEST(PlanPsResume, ALostOwnersShardComesFromItsBuddy) {
  // Old ranks 0..3; rank 1 lost: its buddy (old rank 2) provides it.
  ASSERT_OK_AND_ASSIGN(
      const PsResumePlan plan,
      PlanPsResume(kRun,
                   {Survivor(0, 4, 9), Survivor(2, 4, 9), Survivor(3, 4, 9)},
                   /*hogwild=*/false));
  EXPECT_THAT(plan.source, ElementsAre(0, 1, 1, 2));
  EXPECT_THAT(plan.from_replica, ElementsAre(false, true, false, false));
  EXPECT_EQ(plan.updates, 9);
  EXPECT_EQ(plan.total_workers, 6);
  EXPECT_EQ(plan.joining, 0);
  EXPECT_EQ(plan.carrier, 0);
  // Old rank 0's replica (on 1) is lost; 2's (on 3) is checked, and 3's
  // (on 0) too: both match.
  EXPECT_EQ(plan.checked, 2);
  EXPECT_TRUE(plan.mismatched.empty());
}

TEST(PlanPsResume, ARankAndItsBuddyLostTogetherIsNamed) {
  EXPECT_THAT(
      PlanPsResume(kRun, {Survivor(0, 4, 3), Survivor(3, 4, 3)}, false),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("no survivor holds old rank 1's shard (its buddy, "
                         "old rank 2, was lost too)")));
}

TEST(PlanPsResume, AReplicaThatDiffersFromItsOwnerIsNamedAndNotUsed) {
  PsAccount holder = Survivor(1, 3, 5);
  holder.replica_crc = 12345;  // old rank 0's replica
  ASSERT_OK_AND_ASSIGN(
      const PsResumePlan plan,
      PlanPsResume(kRun, {Survivor(0, 3, 5), holder, Survivor(2, 3, 5)},
                   false));
  EXPECT_THAT(plan.mismatched, ElementsAre(0));
  EXPECT_EQ(plan.checked, 3);
  EXPECT_THAT(plan.from_replica, ElementsAre(false, false, false));
  // A replica behind its owner (an update in flight) is not compared.
  holder.replica_updates = 4;
  ASSERT_OK_AND_ASSIGN(
      const PsResumePlan behind,
      PlanPsResume(kRun, {Survivor(0, 3, 5), holder, Survivor(2, 3, 5)},
                   false));
  EXPECT_TRUE(behind.mismatched.empty());
  EXPECT_EQ(behind.checked, 2);
  // Hogwild owners add without a lock: nothing is compared.
  holder.replica_updates = 5;
  ASSERT_OK_AND_ASSIGN(
      const PsResumePlan hogwild,
      PlanPsResume(kRun, {Survivor(0, 3, 5), holder, Survivor(2, 3, 5)}, true));
  EXPECT_EQ(hogwild.checked, 0);
  EXPECT_TRUE(hogwild.mismatched.empty());
}

TEST(PlanPsResume, ADaemonThatJoinsProvidesNothingAndCountsItsWorkers) {
  // Old rank 1 restarted: it joins (no state); its shard from its buddy.
  ASSERT_OK_AND_ASSIGN(
      const PsResumePlan plan,
      PlanPsResume(kRun, {Joiner(), Survivor(0, 3, 4), Survivor(2, 3, 6)},
                   false));
  EXPECT_THAT(plan.source, ElementsAre(1, 2, 2));
  EXPECT_THAT(plan.from_replica, ElementsAre(false, true, false));
  EXPECT_EQ(plan.joining, 1);
  EXPECT_EQ(plan.carrier, 1);
  EXPECT_EQ(plan.total_workers, 5);
  // Every shard goes on at the largest count among its sources.
  EXPECT_EQ(plan.updates, 6);
}

TEST(PlanPsResume, DisagreementsAndNoCarrierAreRefused) {
  EXPECT_THAT(PlanPsResume(kRun, {Joiner(), Joiner()}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("every one joins it")));
  PsAccount other = Survivor(1, 2, 1);
  other.run_id = kRun + 1;
  EXPECT_THAT(PlanPsResume(kRun, {Survivor(0, 2, 1), other}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("carries run 8, not run 7")));
  PsAccount bigger = Survivor(1, 2, 1);
  bigger.elements = 2000;
  EXPECT_THAT(PlanPsResume(kRun, {Survivor(0, 2, 1), bigger}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the survivors disagree on run 7")));
  EXPECT_THAT(PlanPsResume(kRun, {Survivor(0, 2, 1), Survivor(0, 2, 1)}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("was old rank 0 of 2")));
}

TEST(PsAccount, TravelsAsARowOfIntegersUnchanged) {
  const PsAccount a = Survivor(3, 5, 77);
  const std::vector<int64_t> row = PackPsAccount(a);
  ASSERT_EQ(row.size(), static_cast<size_t>(PsAccount::kFields));
  const PsAccount b = UnpackPsAccount(row.data());
  EXPECT_EQ(PackPsAccount(b), row);
}

// A second daemon lost at the end of a continuation (run/carry_exchange.h):
// where a carrier never moved the second group's state, no daemon confirmed
// it, and the group goes on from the first group's state every carrier
// still holds; where every carrier moved it, from the second group's.
absl::StatusOr<CarryChoice<PsAccount, PsResumePlan>> Choose(
    const std::vector<std::pair<PsAccount, PsAccount>>& held) {
  return ChooseCarried<PsAccount, PsResumePlan>(
      held,
      [](const std::vector<PsAccount>& accounts) {
        return PlanPsResume(kRun, accounts, /*hogwild=*/false);
      },
      [](const PsResumePlan&) { return true; });
}

TEST(ChooseCarried, TheStateEveryCarrierHoldsIsTaken) {
  // Old ranks 0..3 of the first group; rank 3 lost, ranks 0, 1, 2 moved
  // to a second group of 3 (state 55); then its rank 1 lost.
  const auto second = [](int rank) {
    PsAccount a = Survivor(rank, 3, 9);
    a.state_id = 55;
    return a;
  };
  const PsAccount none = Joiner();
  // Old rank 0 never moved it; old rank 2 did, unconfirmed.
  ASSERT_OK_AND_ASSIGN(auto choice, Choose({{Survivor(0, 4, 9), none},
                                            {Survivor(2, 4, 9), second(2)}}));
  EXPECT_THAT(choice.which, ElementsAre(0, 0));
  EXPECT_THAT(choice.plan.source, ElementsAre(0, 1, 1, 0));
  // Both moved it (one confirmed, one not).
  ASSERT_OK_AND_ASSIGN(
      choice, Choose({{second(0), none}, {Survivor(2, 4, 9), second(2)}}));
  EXPECT_THAT(choice.which, ElementsAre(0, 1));
  EXPECT_THAT(choice.plan.source, ElementsAre(0, 1, 1));
  EXPECT_THAT(choice.plan.from_replica, ElementsAre(false, true, false));
  // One confirmed the second group's state, the other holds only the
  // first's: refused, naming them, never mixed.
  EXPECT_THAT(Choose({{second(0), none}, {Survivor(2, 4, 9), none}}).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("old rank 2 of 4")));
}

}  // namespace
}  // namespace node
}  // namespace starling
