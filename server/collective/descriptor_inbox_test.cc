#include "server/collective/descriptor_inbox.h"

#include <cstddef>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/collective/op_descriptor.h"
#include "server/transport/loopback/loopback_transport.h"

namespace starling {
namespace collective {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Wire(uint64_t seq, uint64_t count) {
  OpDescriptor desc;
  desc.seq = seq;
  desc.count = count;
  const auto wire = desc.Encode();
  return std::vector<std::byte>(wire.begin(), wire.end());
}

void Send(transport::Transport* from, int to, uint64_t seq, uint64_t count) {
  const std::vector<std::byte> wire = Wire(seq, count);
  ASSERT_OK(from->SendControl(to, kOpDescriptorTag, wire));
}

// The descriptor's element count, which the tests use to tell copies apart.
uint64_t CountOf(const std::optional<std::vector<std::byte>>& wire) {
  EXPECT_TRUE(wire.has_value());
  if (!wire.has_value()) return 0;
  absl::StatusOr<OpDescriptor> desc = OpDescriptor::Decode(*wire);
  EXPECT_OK(desc.status());
  return desc.ok() ? desc->count : 0;
}

TEST(DescriptorInbox, DropsEarlierOpsAndKeepsLaterOnesInOrder) {
  transport::loopback::LoopbackFabric fabric(3);
  DescriptorInbox inbox(fabric.endpoint(0), kOpDescriptorTag);
  // Rank 1 sends op 3 twice (a partner's copy, then a waiting one), then
  // ops 5 and 6; rank 0 is at op 5.
  Send(fabric.endpoint(1), 0, 3, 30);
  Send(fabric.endpoint(1), 0, 3, 31);
  Send(fabric.endpoint(1), 0, 5, 50);
  Send(fabric.endpoint(1), 0, 6, 60);
  ASSERT_OK_AND_ASSIGN(auto five, inbox.Take(1, 5, absl::InfinitePast()));
  EXPECT_EQ(CountOf(five), 50u);
  EXPECT_EQ(inbox.stale_dropped(), 2u);
  // Op 6's is still queued; taking op 7 first sets it aside, and op 6,
  // looked for after all (a SkipTo the other way cannot happen, but the
  // inbox does not rely on it), is dropped at op 8.
  ASSERT_OK_AND_ASSIGN(auto seven, inbox.Take(1, 7, absl::InfinitePast()));
  EXPECT_FALSE(seven.has_value());
  EXPECT_EQ(inbox.held_ahead(), 0u);
  EXPECT_EQ(inbox.stale_dropped(), 3u);
  // A peer ahead: its op 9 is held while this rank is at op 8.
  Send(fabric.endpoint(2), 0, 9, 90);
  ASSERT_OK_AND_ASSIGN(auto eight, inbox.Take(2, 8, absl::InfinitePast()));
  EXPECT_FALSE(eight.has_value());
  EXPECT_EQ(inbox.held_ahead(), 1u);
  ASSERT_OK_AND_ASSIGN(auto nine, inbox.Take(2, 9, absl::InfinitePast()));
  EXPECT_EQ(CountOf(nine), 90u);
  EXPECT_EQ(inbox.held_ahead(), 0u);
}

TEST(DescriptorInbox, WaitsToItsDeadlineAndTakesWhatComes) {
  transport::loopback::LoopbackFabric fabric(2);
  DescriptorInbox inbox(fabric.endpoint(0), kOpDescriptorTag);
  const absl::Time start = absl::Now();
  ASSERT_OK_AND_ASSIGN(auto none,
                       inbox.Take(1, 0, start + absl::Milliseconds(20)));
  EXPECT_FALSE(none.has_value());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
  // A later op's descriptor does not end the wait for this one's.
  Send(fabric.endpoint(1), 0, 1, 10);
  ASSERT_OK_AND_ASSIGN(auto still_none,
                       inbox.Take(1, 0, absl::Now() + absl::Milliseconds(20)));
  EXPECT_FALSE(still_none.has_value());
  EXPECT_EQ(inbox.held_ahead(), 1u);
  ASSERT_OK_AND_ASSIGN(auto one, inbox.Take(1, 1, absl::InfinitePast()));
  EXPECT_EQ(CountOf(one), 10u);
}

TEST(DescriptorInbox, HandsOverWhatIsNotADescriptorForTheOpToReject) {
  transport::loopback::LoopbackFabric fabric(2);
  DescriptorInbox inbox(fabric.endpoint(0), kOpDescriptorTag);
  const std::vector<std::byte> junk(7, std::byte{0x5a});
  ASSERT_OK(fabric.endpoint(1)->SendControl(0, kOpDescriptorTag, junk));
  ASSERT_OK_AND_ASSIGN(auto got, inbox.Take(1, 4, absl::InfinitePast()));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, junk);
}

TEST(DescriptorInbox, ALostPeerIsAnError) {
  transport::loopback::LoopbackFabric fabric(2);
  DescriptorInbox inbox(fabric.endpoint(0), kOpDescriptorTag);
  fabric.KillRankForTesting(1);
  EXPECT_THAT(inbox.Take(1, 0, absl::InfinitePast()).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
  EXPECT_THAT(inbox.Take(1, 0, absl::Now() + absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1")));
}

TEST(OpDescriptor, TheWaitingFlagTravelsButIsNotPartOfTheCall) {
  OpDescriptor desc;
  desc.seq = 77;
  desc.count = 5;
  desc.waiting = true;
  const auto wire = desc.Encode();
  EXPECT_EQ(OpDescriptor::PeekSeq(wire), 77u);
  EXPECT_EQ(OpDescriptor::PeekSeq(absl::MakeConstSpan(wire).first(12)),
            std::nullopt);
  ASSERT_OK_AND_ASSIGN(OpDescriptor back, OpDescriptor::Decode(wire));
  EXPECT_TRUE(back.waiting);
  OpDescriptor plain = desc;
  plain.waiting = false;
  EXPECT_TRUE(back.Matches(plain));
  ASSERT_OK_AND_ASSIGN(OpDescriptor unflagged,
                       OpDescriptor::Decode(plain.Encode()));
  EXPECT_FALSE(unflagged.waiting);
}

}  // namespace
}  // namespace collective
}  // namespace starling
