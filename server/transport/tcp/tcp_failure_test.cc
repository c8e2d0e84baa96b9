// Failure tests of TcpTransport: rejected writes, lost peers, handshake
// mismatches, ports in use, and a peer process killed mid-write.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/tcp/tcp_transport.h"
#include "server/transport/transport_test_util.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// A write completes once the writer's kernel has taken it, so a rejected
// write fails on the receiver and comes back to the writer as its sticky
// status for that peer (through an ERROR frame), failing its later ops.
void ExpectOutOfRangeWriteIsStickyDataLoss(int sockets_per_peer) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [&](TcpOptions& options) {
                         options.sockets_per_peer = sockets_per_peer;
                       }));
  std::vector<std::byte> region(16, std::byte{0x11});
  ASSERT_OK(group[0]->RegisterRegion(7, absl::MakeSpan(region)));
  std::vector<std::byte> data(16, std::byte{0x22});
  Completion done;
  group[1]->Write(0, data, 7, 8, 0, &done);
  // The buffer was handed over whole before the receiver looked at it.
  EXPECT_OK(done.Wait(Soon()));
  // The receiver never wrote out of range; its sticky error names the writer
  // and the region.
  const auto range_error =
      AllOf(HasSubstr(group[0]->PeerName(1)), HasSubstr("16 bytes at offset 8"),
            HasSubstr("region 0x7 of 16 bytes"));
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{7, 1, {}}, Soon()),
              StatusIs(absl::StatusCode::kDataLoss, range_error));
  EXPECT_EQ(region, std::vector<std::byte>(16, std::byte{0x11}));
  EXPECT_THAT(group[0]->PeerStatus(1),
              StatusIs(absl::StatusCode::kDataLoss, range_error));
  // The writer's next wait on that peer ends with the receiver's reason
  // (this is what synchronizes the test), and so does everything after it.
  const auto sticky = StatusIs(
      absl::StatusCode::kDataLoss,
      AllOf(HasSubstr(group[1]->PeerName(0)), HasSubstr("16 bytes at offset 8"),
            HasSubstr("region 0x7")));
  EXPECT_THAT(group[1]->WaitForWrite(WriteMatch{7, 0, {}}, Soon()), sticky);
  EXPECT_THAT(group[1]->PeerStatus(0), sticky);
  Completion later;
  group[1]->Write(0, absl::MakeConstSpan(data.data(), 1), 7, 0, 0, &later);
  EXPECT_THAT(later.Wait(Soon()), sticky);
  EXPECT_THAT(group[1]->SendControl(0, 0, data), sticky);
}

TEST(TcpFailure, OutOfRangeWriteIsDataLossOnReceiverAndStickyOnWriter) {
  ExpectOutOfRangeWriteIsStickyDataLoss(1);
}

TEST(TcpFailure, OutOfRangeWriteIsStickyOnWriterOverSeveralSockets) {
  ExpectOutOfRangeWriteIsStickyDataLoss(3);
}

TEST(TcpFailure, EarlyWriteOutOfRangeFailsAtRegistration) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2));
  std::vector<std::byte> data(32);
  Completion done;
  group[1]->Write(0, data, 3, 0, 0, &done);
  ASSERT_OK(done.Wait(Soon()));
  // A control message behind it on the same connection: once it is here,
  // the write is held.
  ASSERT_OK(group[1]->SendControl(0, 9, {}));
  ASSERT_OK(group[0]->RecvControl(1, 9, Soon()).status());
  std::vector<std::byte> region(16);
  ASSERT_OK(group[0]->RegisterRegion(3, absl::MakeSpan(region)));
  EXPECT_THAT(group[0]->PeerStatus(1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("32 bytes")));
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{3, 1, {}}, Soon()),
              StatusIs(absl::StatusCode::kDataLoss));
}

// Peers whose connections ended under rank 0 (TcpOptions::on_peer_vanished).
struct VanishedPeers {
  absl::Mutex mu;
  std::vector<int> peers ABSL_GUARDED_BY(mu);

  void Watch(TcpOptions& options) {
    if (options.rank != 0) return;
    options.on_peer_vanished = [this](int peer, const absl::Status&) {
      absl::MutexLock lock(&mu);
      peers.push_back(peer);
    };
  }
  std::vector<int> Get() {
    absl::MutexLock lock(&mu);
    return peers;
  }
  // Waits (bounded) until one was reported.
  std::vector<int> Await() {
    absl::MutexLock lock(&mu);
    mu.AwaitWithDeadline(
        absl::Condition(
            +[](std::vector<int>* p) { return !p->empty(); }, &peers),
        Soon());
    return peers;
  }
};

TEST(TcpFailure, ClosedPeerIsUnavailableNamingRankAndAddress) {
  VanishedPeers vanished;
  ASSERT_OK_AND_ASSIGN(auto group,
                       CreateGroup(3, [&vanished](TcpOptions& options) {
                         vanished.Watch(options);
                       }));
  const std::string name = group[0]->PeerName(2);
  std::thread waiter([&] {
    EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{1, 2, {}}, Soon()),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr(name)));
  });
  std::thread receiver([&] {
    EXPECT_THAT(group[0]->RecvControl(2, 0, Soon()),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr(name)));
  });
  // Rank 2 gives up on rank 0 abruptly: rank 0 sees the connection close.
  group[2]->AbortPeer(0, absl::AbortedError("test"));
  waiter.join();
  receiver.join();
  EXPECT_THAT(group[0]->PeerStatus(2),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(name + " closed the connection")));
  EXPECT_OK(group[0]->PeerStatus(1));
  std::vector<std::byte> data(4);
  Completion done;
  group[0]->Write(2, data, 1, 0, 0, &done);
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(group[0]->SendControl(2, 0, data),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(name)));
  // A wait with no peer given fails too once any peer is lost.
  EXPECT_THAT(group[0]->WaitForWrite(WriteMatch{1, {}, {}}, Soon()),
              StatusIs(absl::StatusCode::kUnavailable));
  // The connection ended under rank 0: reported once, for rank 2 only.
  EXPECT_THAT(vanished.Await(), ElementsAre(2));
}

TEST(TcpFailure, ShutdownIsOrderly) {
  VanishedPeers vanished;
  ASSERT_OK_AND_ASSIGN(auto group,
                       CreateGroup(2, [&vanished](TcpOptions& options) {
                         vanished.Watch(options);
                       }));
  const std::string name = group[0]->PeerName(1);
  group[1].reset();
  EXPECT_THAT(group[0]->RecvControl(1, 0, Soon()),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(name), HasSubstr("shut down"))));
  // A peer that said goodbye did not vanish.
  group[0].reset();
  EXPECT_THAT(vanished.Get(), IsEmpty());
}

TEST(TcpFailure, AbortPeerFinishesPendingWritesBeforeReturning) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(2, [](TcpOptions& options) {
                         options.max_early_bytes = 0;
                         options.socket_send_buffer_bytes = 64 << 10;
                         options.socket_recv_buffer_bytes = 64 << 10;
                       }));
  // Rank 0 holds the first write back (no region, no early room) and stops
  // reading; neither write fits in the small socket buffers, so both stay
  // queued on rank 1.
  std::vector<std::byte> data(4 << 20);
  Completion done;
  group[1]->Write(0, data, 1, 0, 0, &done);
  group[1]->Write(0, data, 1, 0, 1, &done);
  EXPECT_EQ(done.pending(), 2);
  group[1]->AbortPeer(0, absl::DeadlineExceededError("step 7 timed out"));
  EXPECT_EQ(done.pending(), 0);
  EXPECT_THAT(done.Wait(Soon()), StatusIs(absl::StatusCode::kDeadlineExceeded,
                                          HasSubstr("step 7")));
  EXPECT_THAT(group[1]->PeerStatus(0),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(TcpFailure, HandshakeVersionMismatchNamesBothSides) {
  PortReservation ports(2);
  absl::StatusOr<std::unique_ptr<TcpTransport>> results[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      TcpOptions options = TestOptions(ports.peers(), r);
      options.connect_timeout = absl::Seconds(r == 0 ? 1 : 10);
      if (r == 1) options.protocol_version_for_testing = kProtocolVersion + 1;
      results[r] = TcpTransport::Create(options);
    });
  }
  for (auto& thread : threads) thread.join();
  const std::string rank0 =
      absl::StrCat("rank 0 (", ports.peers()[0].ToString(), ")");
  const std::string rank1 =
      absl::StrCat("rank 1 (", ports.peers()[1].ToString(), ")");
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("protocol version mismatch"),
                             HasSubstr(absl::StrCat(rank1, " speaks version ",
                                                    kProtocolVersion + 1)),
                             HasSubstr(absl::StrCat(rank0, " speaks version ",
                                                    kProtocolVersion)))));
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("waiting for connections from " + rank1),
                             HasSubstr("version mismatch"))));
}

TEST(TcpFailure, GroupSizeMismatchIsRefused) {
  PortReservation ports(3);
  std::vector<PeerAddress> short_list(ports.peers().begin(),
                                      ports.peers().begin() + 2);
  absl::StatusOr<std::unique_ptr<TcpTransport>> results[2];
  std::thread zero([&] {
    TcpOptions options = TestOptions(ports.peers(), 0);
    options.connect_timeout = absl::Milliseconds(500);
    results[0] = TcpTransport::Create(options);
  });
  std::thread one(
      [&] { results[1] = TcpTransport::Create(TestOptions(short_list, 1)); });
  zero.join();
  one.join();
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("group size mismatch")));
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST(TcpFailure, PortInUseIsOneClearLine) {
  PortReservation ports(2);
  TcpOptions options = TestOptions(ports.peers(), 1);
  ASSERT_OK_AND_ASSIGN(ScopedFd taken, Listen(ports.peers()[1], 1));
  EXPECT_THAT(TcpTransport::Create(options),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("address ", ports.peers()[1].ToString(),
                                    " already in use (rank 1)")));
}

TEST(TcpFailure, MissingPeerTimesOutNamingIt) {
  PortReservation ports(2);
  TcpOptions options = TestOptions(ports.peers(), 1);
  options.connect_timeout = absl::Milliseconds(300);
  EXPECT_THAT(TcpTransport::Create(options),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("rank 0 (" + ports.peers()[0].ToString())));
}

TEST(TcpFailure, BadOptionsAreInvalidArgument) {
  PortReservation ports(2);
  TcpOptions options = TestOptions(ports.peers(), 2);
  EXPECT_THAT(TcpTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.rank = 0;
  options.sockets_per_peer = 0;
  EXPECT_THAT(TcpTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A child process (rank 1) streams writes to rank 0 until it is SIGKILLed;
// rank 0 must see Unavailable naming rank 1 well within its deadline.
TEST(TcpFailure, KilledPeerProcessIsUnavailableWithinTheDeadline) {
  PortReservation ports(2);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto transport = TcpTransport::Create(TestOptions(ports.peers(), 1));
    if (!transport.ok()) _exit(1);
    std::vector<std::byte> data(1 << 20, std::byte{7});
    while (true) {
      Completion done;
      for (int i = 0; i < 4; ++i) {
        (*transport)->Write(0, data, 1, 0, i, &done);
      }
      if (!done.Wait(absl::InfiniteFuture()).ok()) _exit(2);
    }
  }
  int wstatus = 0;
  ExpectKilledPeerIsUnavailableWithinDeadline(
      TcpTransport::Create(TestOptions(ports.peers(), 0)), child, 1 << 20,
      &wstatus);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(WIFSIGNALED(wstatus));
}

}  // namespace
}  // namespace tcp
}  // namespace transport
}  // namespace starling
