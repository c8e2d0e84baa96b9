#include "server/transport/fault_injection/faulty_transport.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/tcp/tcp_test_util.h"

namespace starling {
namespace transport {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

class FaultyTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto group = tcp::CreateGroup(2);
    ASSERT_OK(group.status());
    faulty_ = std::make_unique<FaultyTransport>(std::move((*group)[0]));
    peer_ = std::move((*group)[1]);
    ASSERT_OK(peer_->RegisterRegion(1, absl::MakeSpan(region_)));
  }

  std::vector<std::byte> region_ = std::vector<std::byte>(64);
  std::vector<std::byte> data_ = std::vector<std::byte>(8, std::byte{5});
  std::unique_ptr<FaultyTransport> faulty_;
  std::unique_ptr<Transport> peer_;
};

TEST_F(FaultyTransportTest, DroppedWriteTimesOutAtTheReceiver) {
  faulty_->DropWrites(1, 1);
  Completion done;
  faulty_->Write(1, data_, 1, 0, 1, &done);
  faulty_->Write(1, data_, 1, 8, 2, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       peer_->WaitForWrite(WriteMatch{1, 0, {}}, Soon()));
  EXPECT_EQ(notice.imm, 2u);
  EXPECT_THAT(
      peer_->WaitForWrite(WriteMatch{1, 0, 1},
                          absl::Now() + absl::Milliseconds(50)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 0")));
}

TEST_F(FaultyTransportTest, DelayedWriteArrivesLater) {
  faulty_->DelayWrites(1, absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  Completion done;
  faulty_->Write(1, data_, 1, 0, 3, &done);
  EXPECT_EQ(done.pending(), 1);
  ASSERT_OK(peer_->WaitForWrite(WriteMatch{1, 0, 3}, Soon()).status());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  ASSERT_OK(done.Wait(Soon()));
}

TEST_F(FaultyTransportTest, CorruptedWriteTakesTheDataLossPath) {
  faulty_->CorruptNextWrite(1);
  Completion done;
  faulty_->Write(1, data_, 1, 0, 0, &done);
  // Handed over whole; the receiver then rejects it, and its DataLoss comes
  // back as the writer's sticky status for that peer.
  EXPECT_OK(done.Wait(Soon()));
  EXPECT_THAT(peer_->WaitForWrite(WriteMatch{1, 0, {}}, Soon()),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(peer_->PeerStatus(0), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(faulty_->WaitForWrite(WriteMatch{1, 1, {}}, Soon()),
              StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(faulty_->PeerStatus(1), StatusIs(absl::StatusCode::kDataLoss));
}

TEST_F(FaultyTransportTest, DroppedControlAndClosedPeer) {
  faulty_->DropControl(1, 1);
  const std::vector<std::byte> one(1, std::byte{1});
  const std::vector<std::byte> two(1, std::byte{2});
  ASSERT_OK(faulty_->SendControl(1, 0, one));
  ASSERT_OK(faulty_->SendControl(1, 0, two));
  ASSERT_OK_AND_ASSIGN(auto message, peer_->RecvControl(0, 0, Soon()));
  EXPECT_EQ(message, two);
  faulty_->ClosePeer(1);
  EXPECT_THAT(faulty_->PeerStatus(1),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("fault injection closed")));
  EXPECT_THAT(peer_->RecvControl(0, 0, Soon()),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("closed the connection")));
}

TEST_F(FaultyTransportTest, ForwardsRetirement) {
  faulty_->RetireRegions(100, 200);
  Completion done;
  peer_->Write(0, data_, 150, 0, 0, &done);
  peer_->Write(0, data_, 2, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  // Published in post order: once the second is in, the first was dropped.
  std::vector<std::byte> region(8);
  ASSERT_OK(faulty_->RegisterRegion(2, absl::MakeSpan(region)));
  ASSERT_OK(faulty_->WaitForWrite(WriteMatch{2, 1, {}}, Soon()).status());
  EXPECT_EQ(faulty_->stale_writes_dropped(), 1u);
  EXPECT_EQ(faulty_->base()->stale_writes_dropped(), 1u);
}

}  // namespace
}  // namespace transport
}  // namespace starling
