// Late writes over real TCP: writes to retired regions are dropped and
// counted without using the early-write room, writes to regions neither
// retired nor registered are still held, and a flood of late writes never
// stalls the connection for live regions (Transport::RetireRegions()).
//
// Synchronisation: the receiver publishes a peer's writes in post order, so
// once a later write to a live region has landed, every earlier write from
// that peer has been held, applied or dropped.
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/tcp/tcp_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

constexpr RegionId kLive = 5;
// Collective-style ids (server/collective/op_context.cc).
constexpr RegionId kOps = RegionId{1} << 63;

class LateWriteTest : public ::testing::Test {
 protected:
  void Form(const std::function<void(TcpOptions&)>& tweak = nullptr) {
    ASSERT_OK_AND_ASSIGN(group_, CreateGroup(2, tweak));
    receiver_ = group_[0].get();
    writer_ = group_[1].get();
    ASSERT_OK(receiver_->RegisterRegion(kLive, absl::MakeSpan(live_)));
  }

  // Posts a write of `bytes` bytes (value `fill`) from rank 1 to rank 0.
  void Write(RegionId region, size_t bytes, uint8_t fill = 7) {
    buffers_.push_back(std::make_unique<std::vector<std::byte>>(
        bytes, static_cast<std::byte>(fill)));
    writer_->Write(0, *buffers_.back(), region, 0, 0, &done_);
  }

  // Writes to the live region and waits for it: everything written before
  // has been dealt with by the receiver.
  absl::Status Sync(absl::Time deadline) {
    Write(kLive, 1, ++sync_imm_);
    return receiver_->WaitForWrite(WriteMatch{kLive, 1, {}}, deadline).status();
  }

  void TearDown() override {
    if (writer_ != nullptr) {
      EXPECT_OK(done_.Wait(Soon()));
    }
  }

  std::vector<std::unique_ptr<TcpTransport>> group_;
  TcpTransport* receiver_ = nullptr;
  TcpTransport* writer_ = nullptr;
  std::vector<std::byte> live_ = std::vector<std::byte>(16);
  std::vector<std::unique_ptr<std::vector<std::byte>>> buffers_;
  Completion done_;
  uint8_t sync_imm_ = 0;
};

TEST_F(LateWriteTest, WritesToRetiredRegionsAreDroppedAndCounted) {
  Form();
  receiver_->RetireRegions(kOps, kOps + 400);
  Write(kOps + 4, 1000);
  Write(kOps + 399, 1000);
  Write(kOps + 400, 300);  // just past the range: held
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->stale_writes_dropped(), 2u);
  EXPECT_EQ(receiver_->early_bytes(), 300u);
  EXPECT_EQ(writer_->stale_writes_dropped(), 0u);
  std::vector<std::byte> region(1000);
  EXPECT_THAT(receiver_->RegisterRegion(kOps + 4, absl::MakeSpan(region)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("retired")));
  EXPECT_OK(receiver_->PeerStatus(1));
}

TEST_F(LateWriteTest, HeldWritesAreDroppedWhenTheirRegionRetires) {
  Form();
  Write(kOps + 8, 4000);
  Write(kOps + 9, 5000);
  Write(kOps + 9, 6000);
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->early_bytes(), 15000u);
  EXPECT_EQ(receiver_->stale_writes_dropped(), 0u);
  receiver_->RetireRegions(kOps, kOps + 9);
  EXPECT_EQ(receiver_->early_bytes(), 11000u);
  EXPECT_EQ(receiver_->stale_writes_dropped(), 1u);
  // Extending the range.
  receiver_->RetireRegions(kOps, kOps + 12);
  EXPECT_EQ(receiver_->early_bytes(), 0u);
  EXPECT_EQ(receiver_->stale_writes_dropped(), 3u);
}

TEST_F(LateWriteTest, UnretiredUnregisteredWritesAreHeldAndDelivered) {
  Form();
  receiver_->RetireRegions(kOps, kOps + 100);
  Write(kOps + 100, 64, 0x42);
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->early_bytes(), 64u);
  std::vector<std::byte> region(64);
  ASSERT_OK(receiver_->RegisterRegion(kOps + 100, absl::MakeSpan(region)));
  ASSERT_OK_AND_ASSIGN(
      WriteNotice notice,
      receiver_->WaitForWrite(WriteMatch{kOps + 100, 1, {}}, Soon()));
  EXPECT_EQ(notice.length_bytes, 64u);
  EXPECT_EQ(region, std::vector<std::byte>(64, std::byte{0x42}));
  EXPECT_EQ(receiver_->stale_writes_dropped(), 0u);
  EXPECT_EQ(receiver_->early_bytes(), 0u);
}

TEST_F(LateWriteTest, RegisteredRegionKeepsReceivingUntilDeregistered) {
  Form();
  std::vector<std::byte> region(32);
  ASSERT_OK(receiver_->RegisterRegion(kOps + 1, absl::MakeSpan(region)));
  receiver_->RetireRegions(kOps, kOps + 4);
  Write(kOps + 1, 32, 0x11);
  ASSERT_OK(
      receiver_->WaitForWrite(WriteMatch{kOps + 1, 1, {}}, Soon()).status());
  ASSERT_OK(receiver_->DeregisterRegion(kOps + 1));
  Write(kOps + 1, 32, 0x22);
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->stale_writes_dropped(), 1u);
  EXPECT_EQ(region, std::vector<std::byte>(32, std::byte{0x11}));
}

// The failure this guards against: late writes of failed or mismatched ops
// used to fill max_early_bytes and pause the connection for good.
TEST_F(LateWriteTest, FloodOfLateWritesDoesNotStallLiveRegions) {
  Form([](TcpOptions& options) { options.max_early_bytes = 64 << 10; });
  receiver_->RetireRegions(kOps, kOps + 1000);
  for (int i = 0; i < 64; ++i) Write(kOps + i, 16 << 10);  // 1 MiB
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->stale_writes_dropped(), 64u);
  EXPECT_EQ(receiver_->early_bytes(), 0u);
  EXPECT_OK(receiver_->PeerStatus(1));
}

TEST_F(LateWriteTest, RetiringResumesAConnectionPausedByLateWrites) {
  Form([](TcpOptions& options) { options.max_early_bytes = 64 << 10; });
  for (int i = 0; i < 8; ++i) Write(kOps + 1500, 16 << 10);
  // The room holds four of them; the fifth pauses the connection, and the
  // live write behind it cannot arrive.
  EXPECT_THAT(Sync(absl::Now() + absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(receiver_->early_bytes(), size_t{64} << 10);
  receiver_->RetireRegions(kOps + 1500, kOps + 1501);
  ASSERT_OK(receiver_->WaitForWrite(WriteMatch{kLive, 1, {}}, Soon()).status());
  EXPECT_EQ(receiver_->stale_writes_dropped(), 8u);
  EXPECT_EQ(receiver_->early_bytes(), 0u);
}

TEST_F(LateWriteTest, StripedLateWriteCountsOnce) {
  Form([](TcpOptions& options) {
    options.sockets_per_peer = 3;
    options.stripe_min_bytes = 4096;
  });
  receiver_->RetireRegions(kOps, kOps + 10);
  Write(kOps + 2, 64 << 10);  // three parts on three connections
  Write(kOps + 3, 64 << 10);
  ASSERT_OK(Sync(Soon()));
  EXPECT_EQ(receiver_->stale_writes_dropped(), 2u);
  EXPECT_EQ(receiver_->early_bytes(), 0u);
}

}  // namespace
}  // namespace tcp
}  // namespace transport
}  // namespace starling
