#include "server/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/transport_test_util.h"

namespace starling {
namespace transport {
namespace shm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// A job id unique to this process and call, so concurrent runs never meet.
std::string UniqueJobId() {
  static std::atomic<int> counter{0};
  return absl::StrCat("test", getpid(), "_", counter.fetch_add(1));
}

ShmOptions TestOptions(const std::string& job, int rank, int size) {
  ShmOptions options;
  options.job_id = job;
  options.rank = rank;
  options.size = size;
  options.ring_bytes = 256 * 1024;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

std::vector<std::unique_ptr<ShmTransport>> CreateGroup(
    int n, const std::function<void(ShmOptions&)>& tweak = nullptr) {
  const std::string job = UniqueJobId();
  std::vector<absl::StatusOr<std::unique_ptr<ShmTransport>>> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ShmOptions options = TestOptions(job, r, n);
      if (tweak) tweak(options);
      results[r] = ShmTransport::Create(options);
    });
  }
  for (auto& thread : threads) thread.join();
  std::vector<std::unique_ptr<ShmTransport>> group;
  for (auto& result : results) {
    EXPECT_OK(result.status());
    if (!result.ok()) return {};
    group.push_back(std::move(*result));
  }
  return group;
}

std::byte Pattern(int rank, size_t i) {
  return static_cast<std::byte>((i * 29 + rank * 7 + (i >> 9)) & 0xFF);
}

class ShmGroupSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmGroupSizeTest, AllToAllWritesLandIntact) {
  const int n = GetParam();
  auto group = CreateGroup(n);
  ASSERT_EQ(group.size(), static_cast<size_t>(n));
  constexpr size_t kSlot = 300007;  // larger than a ring: wraps and refills
  std::vector<std::vector<std::byte>> regions(
      n, std::vector<std::byte>(kSlot * n));
  for (int r = 0; r < n; ++r) {
    ASSERT_OK(group[r]->RegisterRegion(1, absl::MakeSpan(regions[r])));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::byte> data(kSlot);
      for (size_t i = 0; i < kSlot; ++i) data[i] = Pattern(r, i);
      Completion done;
      for (int peer = 0; peer < n; ++peer) {
        if (peer != r) group[r]->Write(peer, data, 1, r * kSlot, r, &done);
      }
      EXPECT_OK(done.Wait(Soon()));
      for (int i = 0; i < n - 1; ++i) {
        auto notice = group[r]->WaitForWrite(WriteMatch{1, {}, {}}, Soon());
        ASSERT_OK(notice.status());
        EXPECT_EQ(notice->offset_bytes, notice->peer * kSlot);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < n; ++r) {
    for (int peer = 0; peer < n; ++peer) {
      if (peer == r) continue;
      for (size_t i = 0; i < kSlot; ++i) {
        ASSERT_EQ(regions[r][peer * kSlot + i], Pattern(peer, i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, ShmGroupSizeTest,
                         ::testing::Values(1, 2, 3, 4, 8));

TEST(ShmTransport, ZeroByteEarlyAndControl) {
  auto group = CreateGroup(2);
  ASSERT_EQ(group.size(), 2u);
  std::vector<std::byte> data(1000, std::byte{3});
  Completion done;
  group[0]->Write(1, absl::MakeConstSpan(data.data(), 0), 2, 5, 1, &done);
  group[0]->Write(1, data, 2, 7, 2, &done);  // before registration
  ASSERT_OK(done.Wait(Soon()));
  std::vector<std::byte> region(1007);
  ASSERT_OK(group[1]->RegisterRegion(2, absl::MakeSpan(region)));
  ASSERT_OK_AND_ASSIGN(auto first,
                       group[1]->WaitForWrite(WriteMatch{2, 0, {}}, Soon()));
  EXPECT_EQ(first.length_bytes, 0u);
  ASSERT_OK_AND_ASSIGN(auto second,
                       group[1]->WaitForWrite(WriteMatch{2, 0, {}}, Soon()));
  EXPECT_EQ(second.offset_bytes, 7u);
  EXPECT_EQ(std::memcmp(region.data() + 7, data.data(), data.size()), 0);
  for (int i = 0; i < 20; ++i) {
    std::vector<std::byte> message(1, static_cast<std::byte>(i));
    ASSERT_OK(group[1]->SendControl(0, i % 3, message));
  }
  for (int tag = 0; tag < 3; ++tag) {
    for (int i = tag; i < 20; i += 3) {
      ASSERT_OK_AND_ASSIGN(auto message, group[0]->RecvControl(1, tag, Soon()));
      ASSERT_EQ(message.size(), 1u);
      EXPECT_EQ(message[0], static_cast<std::byte>(i));
    }
  }
}

// The write completes once it is in the ring; the receiver rejects it and
// its reason becomes the writer's sticky status for that peer.
TEST(ShmTransport, OutOfRangeWriteIsDataLossOnReceiverAndStickyOnWriter) {
  auto group = CreateGroup(2);
  ASSERT_EQ(group.size(), 2u);
  std::vector<std::byte> region(16, std::byte{1});
  ASSERT_OK(group[0]->RegisterRegion(3, absl::MakeSpan(region)));
  std::vector<std::byte> data(16);
  Completion done;
  group[1]->Write(0, data, 3, 1, 0, &done);
  EXPECT_OK(done.Wait(Soon()));
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{3, 1, {}}, Soon()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(group[0]->PeerName(1)),
                             HasSubstr("16 bytes at offset 1"))));
  EXPECT_THAT(
      group[0]->PeerStatus(1),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr(group[0]->PeerName(1))));
  EXPECT_EQ(region, std::vector<std::byte>(16, std::byte{1}));
  const auto sticky = StatusIs(
      absl::StatusCode::kDataLoss,
      AllOf(HasSubstr(group[1]->PeerName(0)), HasSubstr("16 bytes at offset 1"),
            HasSubstr("region 0x3")));
  EXPECT_THAT(group[1]->WaitForWrite(WriteMatch{3, 0, {}}, Soon()), sticky);
  EXPECT_THAT(group[1]->PeerStatus(0), sticky);
  Completion later;
  group[1]->Write(0, data, 3, 0, 0, &later);
  EXPECT_THAT(later.Wait(Soon()), sticky);
}

// See the TCP test of the same name: a receiver that leaves as soon as it
// has the data cannot fail the write.
TEST(ShmTransport, PeerThatReceivedEverythingAndLeftDoesNotFailTheWriter) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  for (int round = 0; round < 20 && absl::Now() < give_up; ++round) {
    auto group = CreateGroup(2);
    ASSERT_EQ(group.size(), 2u);
    // Small, and larger than the ring (finished by the I/O thread).
    const size_t bytes = round % 2 == 0 ? 8 : size_t{1} << 20;
    std::vector<std::byte> region(bytes);
    ASSERT_OK(group[1]->RegisterRegion(5, absl::MakeSpan(region)));
    std::vector<std::byte> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = Pattern(0, i);
    std::thread receiver([&] {
      EXPECT_OK(group[1]->WaitForWrite(WriteMatch{5, 0, {}}, Soon()).status());
      group[1].reset();
    });
    Completion done;
    group[0]->Write(1, data, 5, 0, 0, &done);
    EXPECT_OK(done.Wait(Soon())) << "round " << round;
    receiver.join();
    EXPECT_EQ(region, data) << "round " << round;
  }
}

TEST(ShmTransport, TimeoutAbortAndShutdownNameThePeer) {
  auto group = CreateGroup(3);
  ASSERT_EQ(group.size(), 3u);
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{9, 2, {}},
                                     absl::Now() + absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("from " + group[0]->PeerName(2) + " within")));
  group[2]->AbortPeer(0, absl::AbortedError("test"));
  EXPECT_THAT(
      group[0]->RecvControl(2, 0, Soon()),
      StatusIs(absl::StatusCode::kUnavailable,
               HasSubstr(group[0]->PeerName(2) + " closed the connection")));
  group[1].reset();
  EXPECT_THAT(group[0]->RecvControl(1, 0, Soon()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(group[0]->PeerName(1)),
                             HasSubstr("shut down"))));
}

// Late writes are dropped and counted here as over TCP (the Inbox is
// shared): a flood larger than max_early_bytes does not stall a live region.
TEST(ShmTransport, RetiredRegionsDropLateWritesWithoutStalling) {
  auto group = CreateGroup(
      2, [](ShmOptions& options) { options.max_early_bytes = 16 << 10; });
  ASSERT_EQ(group.size(), 2u);
  group[0]->RetireRegions(1000, 2000);
  std::vector<std::byte> data(8 << 10, std::byte{3});
  Completion done;
  for (int i = 0; i < 16; ++i) group[1]->Write(0, data, 1000 + i, 0, 0, &done);
  std::vector<std::byte> live(8);
  ASSERT_OK(group[0]->RegisterRegion(1, absl::MakeSpan(live)));
  group[1]->Write(0, absl::MakeConstSpan(data.data(), 8), 1, 0, 9, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK(group[0]->WaitForWrite(WriteMatch{1, 1, 9}, Soon()).status());
  EXPECT_EQ(group[0]->stale_writes_dropped(), 16u);
  EXPECT_EQ(group[0]->early_bytes(), 0u);
}

TEST(ShmTransport, VersionMismatchNamesBothSides) {
  const std::string job = UniqueJobId();
  absl::StatusOr<std::unique_ptr<ShmTransport>> results[2];
  std::thread one([&] {
    ShmOptions options = TestOptions(job, 1, 2);
    options.protocol_version_for_testing = kProtocolVersion + 1;
    options.connect_timeout = absl::Seconds(1);
    results[1] = ShmTransport::Create(options);
  });
  ShmOptions options = TestOptions(job, 0, 2);
  options.connect_timeout = absl::Seconds(1);
  results[0] = ShmTransport::Create(options);
  one.join();
  // Both fail. Whichever side looks first reports the mismatch; the other
  // may find the first one's segment already gone and time out.
  int mismatches = 0;
  for (const auto& result : results) {
    ASSERT_FALSE(result.ok());
    if (absl::IsFailedPrecondition(result.status())) {
      ++mismatches;
      EXPECT_THAT(result,
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           AllOf(HasSubstr("protocol version mismatch"),
                                 HasSubstr(absl::StrCat("speaks version ",
                                                        kProtocolVersion + 1)),
                                 HasSubstr(absl::StrCat("speaks version ",
                                                        kProtocolVersion)))));
    } else {
      EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded));
    }
  }
  EXPECT_GE(mismatches, 1);
}

TEST(ShmTransport, NoSegmentsAreLeftBehind) {
  const std::string job = UniqueJobId();
  {
    std::vector<std::unique_ptr<ShmTransport>> group(2);
    std::thread one(
        [&] { group[1] = *ShmTransport::Create(TestOptions(job, 1, 2)); });
    group[0] = *ShmTransport::Create(TestOptions(job, 0, 2));
    one.join();
    for (int r = 0; r < 2; ++r) {
      const int fd =
          shm_open(ShmTransport::SegmentName(job, r).c_str(), O_RDONLY, 0);
      EXPECT_LT(fd, 0) << "segment of rank " << r << " still named";
      if (fd >= 0) close(fd);
    }
  }
}

TEST(ShmTransport, MissingPeerTimesOutNamingIt) {
  ShmOptions options = TestOptions(UniqueJobId(), 0, 2);
  options.connect_timeout = absl::Milliseconds(200);
  EXPECT_THAT(ShmTransport::Create(options),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("rank 1 (shm /starling-")));
}

// A child process (rank 1) streams writes until SIGKILLed; rank 0 must see
// Unavailable naming rank 1 within the deadline (pid liveness check).
TEST(ShmTransport, KilledPeerProcessIsUnavailableWithinTheDeadline) {
  const std::string job = UniqueJobId();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto transport = ShmTransport::Create(TestOptions(job, 1, 2));
    if (!transport.ok()) _exit(1);
    std::vector<std::byte> data(64 * 1024, std::byte{7});
    while (true) {
      Completion done;
      (*transport)->Write(0, data, 1, 0, 0, &done);
      if (!done.Wait(absl::InfiniteFuture()).ok()) _exit(2);
    }
  }
  int wstatus = 0;
  ExpectKilledPeerIsUnavailableWithinDeadline(
      ShmTransport::Create(TestOptions(job, 0, 2)), child, 64 * 1024, &wstatus);
}

}  // namespace
}  // namespace shm
}  // namespace transport
}  // namespace starling
