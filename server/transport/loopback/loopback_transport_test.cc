#include "server/transport/loopback/loopback_transport.h"

#include <cstddef>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/completion.h"

namespace starling {
namespace transport {
namespace loopback {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(5); }

TEST(LoopbackTransport, WriteLandsInRegisteredRegionWithNotice) {
  LoopbackFabric fabric(2);
  std::vector<std::byte> region(8);
  ASSERT_OK(fabric.endpoint(1)->RegisterRegion(7, absl::MakeSpan(region)));
  const std::vector<std::byte> data = Bytes({1, 2, 3});
  Completion done;
  fabric.endpoint(0)->Write(1, data, 7, 4, 42, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK_AND_ASSIGN(WriteNotice notice, fabric.endpoint(1)->WaitForWrite(
                                               WriteMatch{7, 0, 42}, Soon()));
  EXPECT_EQ(notice.peer, 0);
  EXPECT_EQ(notice.offset_bytes, 4u);
  EXPECT_EQ(notice.length_bytes, 3u);
  EXPECT_EQ(region[4], std::byte{1});
  EXPECT_EQ(region[6], std::byte{3});
}

TEST(LoopbackTransport, HoldsEarlyWritesUntilRegistration) {
  LoopbackFabric fabric(2);
  const std::vector<std::byte> data = Bytes({9, 8});
  Completion done;
  fabric.endpoint(0)->Write(1, data, 3, 0, 1, &done);
  ASSERT_OK(done.Wait(Soon()));
  std::vector<std::byte> region(2);
  ASSERT_OK(fabric.endpoint(1)->RegisterRegion(3, absl::MakeSpan(region)));
  ASSERT_OK(fabric.endpoint(1)
                ->WaitForWrite(WriteMatch{3, std::nullopt, 1}, Soon())
                .status());
  EXPECT_EQ(region[0], std::byte{9});
  EXPECT_EQ(region[1], std::byte{8});
}

TEST(LoopbackTransport, WritePastRegionEndIsDataLoss) {
  LoopbackFabric fabric(2);
  std::vector<std::byte> region(2);
  ASSERT_OK(fabric.endpoint(1)->RegisterRegion(3, absl::MakeSpan(region)));
  const std::vector<std::byte> data = Bytes({1, 2, 3});
  Completion done;
  fabric.endpoint(0)->Write(1, data, 3, 0, 0, &done);
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(LoopbackTransport, ControlMessagesArriveInOrderPerTag) {
  LoopbackFabric fabric(2);
  ASSERT_OK(fabric.endpoint(0)->SendControl(1, 5, Bytes({1})));
  ASSERT_OK(fabric.endpoint(0)->SendControl(1, 6, Bytes({2})));
  ASSERT_OK(fabric.endpoint(0)->SendControl(1, 5, Bytes({3})));
  ASSERT_OK_AND_ASSIGN(auto a, fabric.endpoint(1)->RecvControl(0, 5, Soon()));
  ASSERT_OK_AND_ASSIGN(auto b, fabric.endpoint(1)->RecvControl(0, 5, Soon()));
  ASSERT_OK_AND_ASSIGN(auto c, fabric.endpoint(1)->RecvControl(0, 6, Soon()));
  EXPECT_EQ(a, Bytes({1}));
  EXPECT_EQ(b, Bytes({3}));
  EXPECT_EQ(c, Bytes({2}));
}

TEST(LoopbackTransport, TryRecvControlNeverWaits) {
  LoopbackFabric fabric(3);
  ASSERT_OK_AND_ASSIGN(auto none, fabric.endpoint(1)->TryRecvControl(0, 5));
  EXPECT_FALSE(none.has_value());
  ASSERT_OK(fabric.endpoint(0)->SendControl(1, 5, Bytes({7})));
  ASSERT_OK_AND_ASSIGN(auto got, fabric.endpoint(1)->TryRecvControl(0, 5));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, Bytes({7}));
  ASSERT_OK_AND_ASSIGN(none, fabric.endpoint(1)->TryRecvControl(0, 5));
  EXPECT_FALSE(none.has_value());  // taken once
  fabric.KillRankForTesting(2);
  EXPECT_THAT(fabric.endpoint(1)->TryRecvControl(2, 5).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(LoopbackTransport, OversizedControlMessageIsInvalidArgument) {
  LoopbackFabric::Options options;
  options.max_control_bytes = 2;
  LoopbackFabric fabric(2, options);
  EXPECT_THAT(fabric.endpoint(0)->SendControl(1, 0, Bytes({1, 2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LoopbackTransport, WaitTimesOutNamingThePeer) {
  LoopbackFabric fabric(3);
  EXPECT_THAT(fabric.endpoint(0)
                  ->WaitForWrite(WriteMatch{1, 2, std::nullopt},
                                 absl::Now() + absl::Milliseconds(20))
                  .status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("rank 2 (loopback)")));
}

TEST(LoopbackTransport, KilledRankWakesWaitersWithUnavailable) {
  LoopbackFabric fabric(3);
  absl::Status wait_status;
  std::thread waiter([&] {
    wait_status = fabric.endpoint(0)
                      ->WaitForWrite(WriteMatch{1, 2, std::nullopt}, Soon())
                      .status();
  });
  fabric.KillRankForTesting(2);
  waiter.join();
  EXPECT_THAT(wait_status, StatusIs(absl::StatusCode::kUnavailable,
                                    HasSubstr("rank 2 (loopback)")));
  EXPECT_THAT(fabric.endpoint(1)->RecvControl(2, 0, Soon()).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(fabric.endpoint(2)->PeerStatus(0),
              StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_OK(fabric.endpoint(0)->PeerStatus(1));
}

TEST(LoopbackTransport, AbortPeerIsStickyOnBothSides) {
  LoopbackFabric fabric(2);
  fabric.endpoint(0)->AbortPeer(1, absl::DeadlineExceededError("too slow"));
  EXPECT_THAT(fabric.endpoint(0)->PeerStatus(1),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(fabric.endpoint(1)->PeerStatus(0),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("too slow")));
  const std::vector<std::byte> data = Bytes({1});
  Completion done;
  fabric.endpoint(0)->Write(1, data, 1, 0, 0, &done);
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(LoopbackTransport, RegisteringTwiceIsAlreadyExists) {
  LoopbackFabric fabric(1);
  std::vector<std::byte> region(4);
  ASSERT_OK(fabric.endpoint(0)->RegisterRegion(1, absl::MakeSpan(region)));
  EXPECT_THAT(fabric.endpoint(0)->RegisterRegion(1, absl::MakeSpan(region)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_OK(fabric.endpoint(0)->DeregisterRegion(1));
  EXPECT_THAT(fabric.endpoint(0)->DeregisterRegion(1),
              StatusIs(absl::StatusCode::kNotFound));
}

// As over TCP (tcp/late_write_test.cc): retired regions drop and count
// late writes, held ones included, without using the early-write room.
TEST(LoopbackTransport, RetiredRegionsDropAndCountLateWrites) {
  LoopbackFabric::Options options;
  options.max_held_bytes = 4;
  LoopbackFabric fabric(2, options);
  LoopbackTransport* writer = fabric.endpoint(0);
  LoopbackTransport* owner = fabric.endpoint(1);
  const std::vector<std::byte> data = Bytes({1, 2, 3});
  Completion done;
  writer->Write(1, data, 10, 0, 0, &done);  // held
  ASSERT_OK(done.Wait(Soon()));
  owner->RetireRegions(10, 20);
  EXPECT_EQ(owner->stale_writes_dropped(), 1u);
  // Far more than max_held_bytes, all dropped on arrival.
  for (int i = 0; i < 10; ++i) writer->Write(1, data, 10 + i, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  EXPECT_EQ(owner->stale_writes_dropped(), 11u);
  // The room is untouched: an unretired early write is held, then applied.
  writer->Write(1, data, 20, 0, 5, &done);
  ASSERT_OK(done.Wait(Soon()));
  std::vector<std::byte> region(3);
  ASSERT_OK(owner->RegisterRegion(20, absl::MakeSpan(region)));
  ASSERT_OK(owner->WaitForWrite(WriteMatch{20, 0, 5}, Soon()).status());
  EXPECT_EQ(region, data);
  EXPECT_THAT(
      owner->RegisterRegion(15, absl::MakeSpan(region)),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("retired")));
  EXPECT_EQ(writer->stale_writes_dropped(), 0u);
}

TEST(LoopbackTransport, RetiredRegisteredRegionReceivesUntilDeregistered) {
  LoopbackFabric fabric(2);
  std::vector<std::byte> region(3);
  ASSERT_OK(fabric.endpoint(1)->RegisterRegion(4, absl::MakeSpan(region)));
  fabric.endpoint(1)->RetireRegions(0, 8);
  const std::vector<std::byte> data = Bytes({7, 8, 9});
  Completion done;
  fabric.endpoint(0)->Write(1, data, 4, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK(
      fabric.endpoint(1)->WaitForWrite(WriteMatch{4, 0, 0}, Soon()).status());
  ASSERT_OK(fabric.endpoint(1)->DeregisterRegion(4));
  fabric.endpoint(0)->Write(1, data, 4, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  EXPECT_EQ(fabric.endpoint(1)->stale_writes_dropped(), 1u);
}

}  // namespace
}  // namespace loopback
}  // namespace transport
}  // namespace starling
