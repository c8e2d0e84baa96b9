// Data-path tests of TcpTransport: real sockets on 127.0.0.1, every rank of
// a group in this process (one thread per rank where they must act at once).
#include "server/transport/tcp/tcp_transport.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/tcp/tcp_test_util.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// Returns once `to` has handled every frame `from` sent it before the call
// (with one socket per peer): a control message follows them on the same
// connection. A write's completion no longer says that it has landed.
void Fence(Transport* from, Transport* to) {
  constexpr uint32_t kFenceTag = 77;
  ASSERT_OK(from->SendControl(to->rank(), kFenceTag, {}));
  ASSERT_OK(to->RecvControl(from->rank(), kFenceTag, Soon()).status());
}

// Byte `i` of the pattern written by `rank`.
std::byte Pattern(int rank, size_t i) {
  return static_cast<std::byte>((i * 131 + rank * 17 + (i >> 11)) & 0xFF);
}

std::vector<std::byte> MakePattern(int rank, size_t n) {
  std::vector<std::byte> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = Pattern(rank, i);
  return data;
}

class TcpGroupSizeTest : public ::testing::TestWithParam<int> {};

// Every rank writes its pattern into slot `rank` of every other rank's
// region; each rank then finds size-1 correct slots.
TEST_P(TcpGroupSizeTest, AllToAllWritesLandIntact) {
  const int n = GetParam();
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(n));
  constexpr size_t kSlot = 10007;  // odd, so slots are unaligned
  std::vector<std::vector<std::byte>> regions(
      n, std::vector<std::byte>(kSlot * n));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(group[r]->rank(), r);
    EXPECT_EQ(group[r]->size(), n);
    ASSERT_OK(group[r]->RegisterRegion(7, absl::MakeSpan(regions[r])));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      const std::vector<std::byte> data = MakePattern(r, kSlot);
      Completion done;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) {
          group[r]->Write(peer, data, 7, r * kSlot, /*imm=*/r, &done);
        }
      }
      EXPECT_OK(done.Wait(Soon()));
      for (int i = 0; i < n - 1; ++i) {
        auto notice = group[r]->WaitForWrite(WriteMatch{7, {}, {}}, Soon());
        ASSERT_OK(notice.status());
        EXPECT_EQ(notice->region, 7u);
        EXPECT_EQ(notice->offset_bytes, notice->peer * kSlot);
        EXPECT_EQ(notice->length_bytes, kSlot);
        EXPECT_EQ(notice->imm, static_cast<uint32_t>(notice->peer));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < n; ++r) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      for (size_t i = 0; i < kSlot; ++i) {
        ASSERT_EQ(regions[r][peer * kSlot + i], Pattern(peer, i))
            << "rank " << r << " slot " << peer << " byte " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, TcpGroupSizeTest,
                         ::testing::Values(1, 2, 3, 4, 8));

// Regression: the last op of a program failed with "writing to rank 1: rank 1
// shut down (said goodbye)" although rank 1 had received everything. A
// write's completion waited for an ACK that could arrive after the
// receiver's GOODBYE. Now it completes once the writer's kernel has taken
// the bytes, so a receiver that leaves as soon as it has the data cannot
// fail it. Repeated, bounded in time, to give the race room to show.
TEST(TcpTransport, PeerThatReceivedEverythingAndLeftDoesNotFailTheWriter) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  for (int round = 0; round < 40 && absl::Now() < give_up; ++round) {
    ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
    // Alternate a small write (sent from the caller's thread) with one the
    // event loop finishes sending.
    const size_t bytes = round % 2 == 0 ? 8 : size_t{1} << 20;
    std::vector<std::byte> region(bytes);
    ASSERT_OK(group[1]->RegisterRegion(5, absl::MakeSpan(region)));
    const std::vector<std::byte> data = MakePattern(0, bytes);
    std::thread receiver([&] {
      EXPECT_OK(group[1]->WaitForWrite(WriteMatch{5, 0, {}}, Soon()).status());
      group[1].reset();  // leaves at once, saying GOODBYE
    });
    Completion done;
    group[0]->Write(1, data, 5, 0, 0, &done);
    EXPECT_OK(done.Wait(Soon())) << "round " << round;
    receiver.join();
    EXPECT_EQ(region, data) << "round " << round;
    // Rank 0 learns of the orderly shutdown; nothing else failed.
    EXPECT_THAT(
        group[0]->RecvControl(1, 0, Soon()),
        StatusIs(absl::StatusCode::kUnavailable, HasSubstr("said goodbye")));
  }
}

// A collective sends its op descriptor with its first write to a peer: with
// one socket per peer the receiver finds the message as soon as the write
// has landed; with several (the write may take another socket) it comes
// too. The write's bytes land intact either way.
TEST(TcpTransport, ControlSentWithAWriteIsThereWhenTheWriteLands) {
  for (int sockets : {1, 3}) {
    ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [&](TcpOptions& o) {
                           o.sockets_per_peer = sockets;
                           o.stripe_min_bytes = 1024;
                         }));
    std::vector<std::byte> region(5000);
    ASSERT_OK(group[1]->RegisterRegion(4, absl::MakeSpan(region)));
    for (int round = 0; round < 50; ++round) {
      const std::vector<std::byte> message = MakePattern(round, 60);
      const std::vector<std::byte> data = MakePattern(round + 1, 4000);
      Completion done;
      ASSERT_OK(group[0]->SendControlThenWrite(1, /*tag=*/12, message, data,
                                               /*remote=*/4, /*offset=*/round,
                                               /*imm=*/round, &done));
      WriteMatch match;
      match.region = 4;
      match.imm = round;
      ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                           group[1]->WaitForWrite(match, Soon()));
      EXPECT_EQ(notice.length_bytes, data.size());
      if (sockets == 1) {
        ASSERT_OK_AND_ASSIGN(auto got, group[1]->TryRecvControl(0, 12));
        ASSERT_TRUE(got.has_value()) << "round " << round;
        EXPECT_EQ(*got, message);
      } else {
        ASSERT_OK_AND_ASSIGN(auto got, group[1]->RecvControl(0, 12, Soon()));
        EXPECT_EQ(got, message);
      }
      EXPECT_TRUE(std::equal(data.begin(), data.end(), region.begin() + round))
          << "sockets " << sockets << " round " << round;
      ASSERT_OK(done.Wait(Soon()));
    }
  }
}

TEST(TcpTransport, ControlWithAWriteToAFailedPeerFailsBothNamingIt) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  group[0]->AbortPeer(1, absl::UnavailableError("rank 1 went away"));
  const std::vector<std::byte> data(16);
  Completion done;
  EXPECT_THAT(
      group[0]->SendControlThenWrite(1, 12, {}, data, 4, 0, 0, &done),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 went away")));
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kUnavailable,
                                          HasSubstr("rank 1 went away")));
}

TEST(TcpTransport, TryRecvControlTakesWhatIsHereWithoutWaiting) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  ASSERT_OK_AND_ASSIGN(auto none, group[1]->TryRecvControl(0, 9));
  EXPECT_FALSE(none.has_value());
  const std::vector<std::byte> message = MakePattern(0, 32);
  ASSERT_OK(group[0]->SendControl(1, 9, message));
  // Polls (bounded) until the event loop has queued it.
  std::optional<std::vector<std::byte>> got;
  const absl::Time deadline = Soon();
  while (!got.has_value() && absl::Now() < deadline) {
    ASSERT_OK_AND_ASSIGN(got, group[1]->TryRecvControl(0, 9));
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, message);
  ASSERT_OK_AND_ASSIGN(none, group[1]->TryRecvControl(0, 9));
  EXPECT_FALSE(none.has_value());
}

TEST(TcpTransport, ZeroOneAndUnalignedWrites) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  std::vector<std::byte> region(4099, std::byte{0});
  ASSERT_OK(group[1]->RegisterRegion(1, absl::MakeSpan(region)));
  const std::vector<std::byte> data = MakePattern(0, 4099);
  Completion done;
  group[0]->Write(1, absl::MakeConstSpan(data.data(), 0), 1, 4099, 10, &done);
  group[0]->Write(1, absl::MakeConstSpan(data.data(), 1), 1, 0, 11, &done);
  group[0]->Write(1, absl::MakeConstSpan(data.data() + 1, 4097), 1, 1, 12,
                  &done);
  group[0]->Write(1, absl::MakeConstSpan(data.data() + 4098, 1), 1, 4098, 13,
                  &done);
  ASSERT_OK(done.Wait(Soon()));
  // Landed in post order; pick them by imm.
  ASSERT_OK_AND_ASSIGN(WriteNotice empty,
                       group[1]->WaitForWrite(WriteMatch{1, 0, 10}, Soon()));
  EXPECT_EQ(empty.offset_bytes, 4099u);
  EXPECT_EQ(empty.length_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(WriteNotice last,
                       group[1]->WaitForWrite(WriteMatch{1, 0, 13}, Soon()));
  EXPECT_EQ(last.length_bytes, 1u);
  ASSERT_OK_AND_ASSIGN(WriteNotice one,
                       group[1]->WaitForWrite(WriteMatch{1, {}, {}}, Soon()));
  EXPECT_EQ(one.imm, 11u);
  EXPECT_EQ(region, data);
}

TEST(TcpTransport, StripesLargeWritesOverSeveralSockets) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [](TcpOptions& options) {
                         options.sockets_per_peer = 4;
                       }));
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<std::byte> region(kBytes + 3, std::byte{0});
  ASSERT_OK(group[0]->RegisterRegion(2, absl::MakeSpan(region)));
  const std::vector<std::byte> data = MakePattern(1, kBytes);
  Completion done;
  group[1]->Write(0, data, 2, 3, 99, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       group[0]->WaitForWrite(WriteMatch{2, 1, 99}, Soon()));
  EXPECT_EQ(notice.offset_bytes, 3u);
  EXPECT_EQ(notice.length_bytes, kBytes);
  EXPECT_EQ(std::memcmp(region.data() + 3, data.data(), kBytes), 0);
}

TEST(TcpTransport, StripedAndSmallWritesKeepPostOrder) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [](TcpOptions& options) {
                         options.sockets_per_peer = 3;
                         options.stripe_min_bytes = 64 * 1024;
                       }));
  constexpr int kWrites = 40;
  constexpr size_t kBig = 300 * 1024;
  std::vector<std::byte> region(kBig * kWrites);
  ASSERT_OK(group[1]->RegisterRegion(3, absl::MakeSpan(region)));
  const std::vector<std::byte> data = MakePattern(0, kBig);
  Completion done;
  for (int i = 0; i < kWrites; ++i) {
    const size_t length = i % 2 == 0 ? kBig : 100;  // striped, then not
    group[0]->Write(1, absl::MakeConstSpan(data.data(), length), 3, i * kBig,
                    /*imm=*/5, &done);
  }
  ASSERT_OK(done.Wait(Soon()));
  for (int i = 0; i < kWrites; ++i) {
    ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                         group[1]->WaitForWrite(WriteMatch{3, 0, 5}, Soon()));
    EXPECT_EQ(notice.offset_bytes, i * kBig) << i;
  }
}

TEST(TcpTransport, EarlyWritesApplyAtRegistration) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  const std::vector<std::byte> data = MakePattern(1, 5000);
  Completion done;
  group[1]->Write(0, data, 9, 100, 1, &done);
  ASSERT_OK(done.Wait(Soon()));
  Fence(group[1].get(), group[0].get());
  // Held before any region exists.
  EXPECT_EQ(group[0]->early_bytes(), 5000u);
  std::vector<std::byte> region(5100);
  ASSERT_OK(group[0]->RegisterRegion(9, absl::MakeSpan(region)));
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       group[0]->WaitForWrite(WriteMatch{9, 1, 1}, Soon()));
  EXPECT_EQ(notice.offset_bytes, 100u);
  EXPECT_EQ(group[0]->early_bytes(), 0u);
  EXPECT_EQ(std::memcmp(region.data() + 100, data.data(), data.size()), 0);
}

TEST(TcpTransport, EarlyWritesBeyondTheBoundWaitForRegistration) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [](TcpOptions& options) {
                         options.max_early_bytes = 4096;
                       }));
  const std::vector<std::byte> data = MakePattern(1, 1 << 20);
  Completion done;
  group[1]->Write(0, data, 4, 0, 1, &done);
  ASSERT_OK(group[1]->SendControl(0, 3, {}));
  // Rank 0 stopped reading that connection until the region exists, so the
  // control message behind the write does not arrive.
  EXPECT_THAT(
      group[0]->RecvControl(1, 3, absl::Now() + absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LE(group[0]->early_bytes(), 4096u);
  std::vector<std::byte> region(1 << 20);
  ASSERT_OK(group[0]->RegisterRegion(4, absl::MakeSpan(region)));
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK(group[0]->WaitForWrite(WriteMatch{4, 1, 1}, Soon()).status());
  ASSERT_OK(group[0]->RecvControl(1, 3, Soon()).status());
  EXPECT_EQ(region, data);
  EXPECT_LE(group[0]->early_bytes(), 4096u);
}

TEST(TcpTransport, ControlMessagesArriveInOrderPerTag) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(3));
  for (int i = 0; i < 50; ++i) {
    const std::string text = absl::StrCat("message ", i);
    const auto bytes = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(text.data()), text.size());
    ASSERT_OK(group[2]->SendControl(0, /*tag=*/i % 2, bytes));
  }
  ASSERT_OK(group[1]->SendControl(0, 0, {}));
  for (int tag = 1; tag >= 0; --tag) {
    for (int i = tag; i < 50; i += 2) {
      ASSERT_OK_AND_ASSIGN(auto message, group[0]->RecvControl(2, tag, Soon()));
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(message.data()),
                            message.size()),
                absl::StrCat("message ", i));
    }
  }
  ASSERT_OK_AND_ASSIGN(auto empty, group[0]->RecvControl(1, 0, Soon()));
  EXPECT_TRUE(empty.empty());
}

TEST(TcpTransport, ControlMessageSizeIsBounded) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [](TcpOptions& options) {
                         options.max_control_bytes = 16;
                       }));
  EXPECT_EQ(group[0]->max_control_bytes(), 16u);
  std::vector<std::byte> big(17);
  EXPECT_THAT(group[0]->SendControl(1, 0, big),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_control_bytes")));
}

TEST(TcpTransport, RejectsBadArguments) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  std::vector<std::byte> region(8);
  ASSERT_OK(group[0]->RegisterRegion(1, absl::MakeSpan(region)));
  EXPECT_THAT(group[0]->RegisterRegion(1, absl::MakeSpan(region)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(group[0]->DeregisterRegion(2),
              StatusIs(absl::StatusCode::kNotFound));
  Completion done;
  group[0]->Write(0, region, 1, 0, 0, &done);  // to itself
  group[0]->Write(5, region, 1, 0, 0, &done);
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(group[0]->RecvControl(0, 0, Soon()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(group[0]->PeerStatus(3),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(group[0]->PeerStatus(1));
  EXPECT_EQ(
      group[0]->PeerName(1),
      absl::StrCat("rank 1 (127.0.0.1:", group[1]->PeerName(1).substr(18)));
}

TEST(TcpTransport, WaitTimesOutNamingThePeer) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(3));
  const absl::Time deadline = absl::Now() + absl::Milliseconds(100);
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{0x2a, 2, {}}, deadline),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("no write to region 0x2a from " +
                                 group[0]->PeerName(2) + " within")));
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{0x2a, {}, {}}, deadline),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr(group[0]->PeerName(1))));
  EXPECT_THAT(group[0]->RecvControl(1, 4, deadline),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("tag 4 from " + group[0]->PeerName(1))));
}

TEST(TcpTransport, DeregisterDropsNoticesAndLaterWritesHold) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  std::vector<std::byte> region(64);
  ASSERT_OK(group[0]->RegisterRegion(5, absl::MakeSpan(region)));
  const std::vector<std::byte> data = MakePattern(1, 64);
  Completion done;
  group[1]->Write(0, data, 5, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  Fence(group[1].get(), group[0].get());  // landed; its notice is unread
  ASSERT_OK(group[0]->DeregisterRegion(5));
  group[1]->Write(0, data, 5, 0, 1, &done);
  ASSERT_OK(done.Wait(Soon()));
  std::vector<std::byte> again(64);
  ASSERT_OK(group[0]->RegisterRegion(5, absl::MakeSpan(again)));
  ASSERT_OK_AND_ASSIGN(WriteNotice notice,
                       group[0]->WaitForWrite(WriteMatch{5, 1, {}}, Soon()));
  EXPECT_EQ(notice.imm, 1u);
  EXPECT_EQ(again, data);
}

}  // namespace
}  // namespace tcp
}  // namespace transport
}  // namespace starling
