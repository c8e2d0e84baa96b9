// Mesh formation over real sockets: strangers (idle, garbage, forged,
// duplicate) delay no one and take no rank's slot; the cluster secret and
// the loopback policy; a pre-bound listening socket.
#include "server/transport/tcp/mesh.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/logging.h"
#include "server/base/status_matchers.h"
#include "server/transport/auth.h"
#include "server/transport/frame.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_test_util.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// Formation must finish well within this; a stranger that held up the
// accept loop for handshake_timeout (longer) would make it fail.
constexpr absl::Duration kConnectWindow = absl::Seconds(10);
constexpr absl::Duration kLongHandshake = absl::Seconds(60);

// Collects log lines while alive.
class LogCapture {
 public:
  LogCapture() {
    SetLogSinkForTesting([this](LogSeverity, absl::string_view line) {
      absl::MutexLock lock(&mu_);
      absl::StrAppend(&text_, line, "\n");
    });
  }
  ~LogCapture() { SetLogSinkForTesting(nullptr); }
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }

 private:
  absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

// Listening sockets for every rank of a group, bound up front (as a daemon
// binds its data port before it joins), so strangers can connect first.
struct Listeners {
  explicit Listeners(int n) : ports(n) {
    for (int r = 0; r < n; ++r) {
      absl::StatusOr<ScopedFd> fd = Listen(ports.peers()[r], r);
      EXPECT_OK(fd.status());
      if (fd.ok()) fds.push_back(std::move(*fd));
    }
  }
  // Hands rank `rank`'s socket to its options.
  void Give(TcpOptions& options) {
    options.listen_fd = fds[options.rank].release();
  }
  const std::vector<PeerAddress>& peers() const { return ports.peers(); }

  PortReservation ports;
  std::vector<ScopedFd> fds;
};

// A plain client connection to `address`.
ScopedFd Dial(const PeerAddress& address) {
  absl::StatusOr<ScopedFd> fd = ConnectWithRetry(
      address, "test", Soon(), absl::Milliseconds(10), absl::Milliseconds(100));
  EXPECT_OK(fd.status());
  return fd.ok() ? std::move(*fd) : ScopedFd();
}

void SendAll(int fd, const std::vector<uint8_t>& bytes) {
  ASSERT_OK(SendAllUntil(fd, bytes.data(), bytes.size(), Soon(), "test"));
}

// HELLO and CHALLENGE as `rank` would send them to `receiver`.
std::vector<uint8_t> ForgedOpening(int rank, int receiver, int group_size,
                                   AuthMode mode) {
  Hello hello;
  hello.sender_rank = rank;
  hello.group_size = group_size;
  hello.receiver_rank = receiver;
  uint8_t hello_frame[kHelloFrameBytes];
  EncodeHelloFrame(hello, hello_frame);
  Challenge challenge;
  challenge.mode = mode;
  uint8_t challenge_frame[kChallengeFrameBytes];
  EncodeChallengeFrame(challenge, challenge_frame);
  std::vector<uint8_t> bytes(hello_frame, hello_frame + sizeof(hello_frame));
  bytes.insert(bytes.end(), challenge_frame,
               challenge_frame + sizeof(challenge_frame));
  return bytes;
}

// Writes `data` from `from` to `to` and checks that it lands.
void ExpectDataFlows(TcpTransport* from, TcpTransport* to) {
  std::vector<std::byte> region(8);
  ASSERT_OK(to->RegisterRegion(77, absl::MakeSpan(region)));
  std::vector<std::byte> data(8, std::byte{0x5c});
  Completion done;
  from->Write(to->rank(), data, 77, 0, 3, &done);
  ASSERT_OK(done.Wait(Soon()));
  ASSERT_OK(to->WaitForWrite(WriteMatch{77, from->rank(), 3}, Soon()).status());
  EXPECT_EQ(region, data);
  ASSERT_OK(to->DeregisterRegion(77));
}

TEST(Mesh, IdleConnectionDelaysNoOne) {
  Listeners listeners(3);
  // Connected before the group starts, and silent throughout.
  ScopedFd idle0 = Dial(listeners.peers()[0]);
  ScopedFd idle1 = Dial(listeners.peers()[1]);
  ASSERT_OK_AND_ASSIGN(
      auto group, CreateGroupOn(listeners.peers(), [&](TcpOptions& options) {
        listeners.Give(options);
        options.connect_timeout = kConnectWindow;
        options.handshake_timeout = kLongHandshake;
      }));
  ExpectDataFlows(group[2].get(), group[0].get());
}

TEST(Mesh, GarbageAndHalfHandshakesDelayNoOne) {
  Listeners listeners(3);
  ScopedFd garbage = Dial(listeners.peers()[0]);
  SendAll(garbage.get(), std::vector<uint8_t>(100, 0xab));
  // A HELLO claiming rank 2, then nothing more (no CHALLENGE).
  ScopedFd half = Dial(listeners.peers()[0]);
  std::vector<uint8_t> opening = ForgedOpening(2, 0, 3, AuthMode::kNone);
  opening.resize(kHelloFrameBytes);
  SendAll(half.get(), opening);
  ASSERT_OK_AND_ASSIGN(
      auto group, CreateGroupOn(listeners.peers(), [&](TcpOptions& options) {
        listeners.Give(options);
        options.connect_timeout = kConnectWindow;
        options.handshake_timeout = kLongHandshake;
      }));
  ExpectDataFlows(group[2].get(), group[0].get());
  // The garbage was refused at once, with an ERROR frame saying why.
  uint8_t header[kFrameHeaderBytes];
  ASSERT_OK(RecvAllUntil(garbage.get(), header, sizeof(header), Soon(), "r0"));
  ASSERT_OK_AND_ASSIGN(FrameHeader refusal, DecodeFrameHeader(header));
  EXPECT_EQ(refusal.type, FrameType::kError);
  EXPECT_EQ(refusal.imm, static_cast<uint32_t>(absl::StatusCode::kDataLoss));
}

// The scenario that broke formation before: a stranger's HELLO claims
// rank 2 at ranks 0 and 1 before the real rank 2 starts.
TEST(Mesh, ForgedHelloIsRefusedAndTheRealRankJoins) {
  LogCapture log;
  Listeners listeners(3);
  // At rank 0 the forger goes through with a made-up proof, sent with its
  // opening so that rank 0 judges it before the real rank 2 completes the
  // mesh (a handshake still running then is closed, not refused).
  ScopedFd forged0 = Dial(listeners.peers()[0]);
  std::vector<uint8_t> opening = ForgedOpening(2, 0, 3, AuthMode::kHmacSha256);
  uint8_t proof[kProofFrameBytes];
  EncodeProofFrame(Proof{}, proof);
  opening.insert(opening.end(), proof, proof + sizeof(proof));
  SendAll(forged0.get(), opening);
  // At rank 1 it claims the slot and falls silent.
  ScopedFd forged1 = Dial(listeners.peers()[1]);
  SendAll(forged1.get(), ForgedOpening(2, 1, 3, AuthMode::kHmacSha256));
  std::thread forger([&] {
    // Rank 0 answers HELLO, CHALLENGE and its own PROOF...
    std::vector<uint8_t> answer(kHelloFrameBytes + kChallengeFrameBytes +
                                kProofFrameBytes);
    ASSERT_OK(RecvAllUntil(forged0.get(), answer.data(), answer.size(), Soon(),
                           "rank 0"));
    // ...and refuses the proof made without the secret.
    uint8_t header[kFrameHeaderBytes];
    ASSERT_OK(
        RecvAllUntil(forged0.get(), header, sizeof(header), Soon(), "rank 0"));
    ASSERT_OK_AND_ASSIGN(FrameHeader refusal, DecodeFrameHeader(header));
    EXPECT_EQ(refusal.type, FrameType::kError);
    EXPECT_EQ(refusal.imm,
              static_cast<uint32_t>(absl::StatusCode::kUnauthenticated));
  });
  ASSERT_OK_AND_ASSIGN(
      auto group, CreateGroupOn(listeners.peers(), [&](TcpOptions& options) {
        listeners.Give(options);
        options.cluster_secret = "s3cret";
        options.connect_timeout = kConnectWindow;
        options.handshake_timeout = kLongHandshake;
      }));
  forger.join();
  ExpectDataFlows(group[2].get(), group[0].get());
  ExpectDataFlows(group[2].get(), group[1].get());
  // Refused and logged with where it came from.
  EXPECT_THAT(log.text(),
              AllOf(HasSubstr(group[0]->PeerName(0) +
                              " refused a connection from 127.0.0.1:"),
                    HasSubstr("claiming to be " + group[0]->PeerName(2) +
                              " failed the cluster-secret challenge")));
}

TEST(Mesh, SecondClaimOfAConnectedSlotIsRefusedNotTheOriginal) {
  Listeners listeners(2);
  TcpOptions options0 = TestOptions(listeners.peers(), 0);
  TcpOptions options1 = TestOptions(listeners.peers(), 1);
  for (TcpOptions* options : {&options0, &options1}) {
    options->cluster_secret = "s3cret";
    options->sockets_per_peer = 2;
  }
  listeners.Give(options0);
  absl::StatusOr<std::unique_ptr<TcpTransport>> rank0;
  std::thread creator([&] { rank0 = TcpTransport::Create(options0); });
  auto name = [&](int r) {
    return absl::StrCat("rank ", r, " (", listeners.peers()[r].ToString(), ")");
  };
  // Rank 1's socket 0, authenticated: it holds the slot...
  ASSERT_OK_AND_ASSIGN(ScopedFd original,
                       DialPeer(options1, 0, 0, Soon(), name));
  // ...so another authenticated claim of it is refused.
  EXPECT_THAT(DialPeer(options1, 0, 0, Soon(), name),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(name(1) + " is already connected"),
                             HasSubstr("socket 0"))));
  ASSERT_OK_AND_ASSIGN(ScopedFd second, DialPeer(options1, 0, 1, Soon(), name));
  creator.join();
  ASSERT_OK(rank0.status());
  // The original carries rank 0's traffic (control messages use socket 0).
  ASSERT_OK((*rank0)->SendControl(1, 5, std::vector<std::byte>(3)));
  uint8_t header[kFrameHeaderBytes];
  ASSERT_OK(RecvAllUntil(original.get(), header, sizeof(header), Soon(), "0"));
  ASSERT_OK_AND_ASSIGN(FrameHeader control, DecodeFrameHeader(header));
  EXPECT_EQ(control.type, FrameType::kControl);
  EXPECT_EQ(control.imm, 5u);
}

TEST(Mesh, SecretGroupFormsAndMovesData) {
  ASSERT_OK_AND_ASSIGN(auto group, CreateGroup(4, [](TcpOptions& options) {
                         options.cluster_secret = std::string("k\0ey", 4);
                         options.sockets_per_peer = 2;
                       }));
  ExpectDataFlows(group[3].get(), group[0].get());
  ExpectDataFlows(group[1].get(), group[2].get());
}

TEST(Mesh, DifferentSecretsFailNamingTheFix) {
  PortReservation ports(2);
  const auto results = CreateEachOn(ports.peers(), [](TcpOptions& options) {
    options.cluster_secret = options.rank == 0 ? "alpha" : "beta";
    options.connect_timeout = absl::Seconds(options.rank == 0 ? 1 : 10);
  });
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kUnauthenticated,
                                   AllOf(HasSubstr("rank 0 ("),
                                         HasSubstr("failed the cluster-secret"),
                                         HasSubstr("--cluster_secret_file"))));
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("waiting for connections from rank 1"),
                             HasSubstr("last refused"))));
}

TEST(Mesh, ADaemonOfAnOlderGroupEpochIsRefused) {
  // Rank 1 still has the answer of a group the coordinator re-formed since.
  PortReservation ports(2);
  const auto results = CreateEachOn(ports.peers(), [](TcpOptions& options) {
    options.group_epoch = options.rank == 0 ? 3 : 2;
    options.connect_timeout = absl::Seconds(options.rank == 0 ? 1 : 10);
  });
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   AllOf(HasSubstr("group epoch mismatch"),
                                         HasSubstr("of group epoch 2 reached"),
                                         HasSubstr("of group epoch 3"),
                                         HasSubstr("re-formed since"))));
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("waiting for connections from rank 1"),
                             HasSubstr("group epoch mismatch"))));
}

TEST(Mesh, ADaemonAheadDialsUntilItsPeerHasReFormed) {
  // Rank 1 learnt of group epoch 3 first; rank 0 still forms epoch 2 on the
  // same port, refuses rank 1 as ahead of it and gives up, then forms
  // epoch 3: rank 1's dialling meanwhile must not have given up.
  PortReservation ports(2);
  absl::StatusOr<std::unique_ptr<TcpTransport>> ahead;
  std::thread dialler([&] {
    TcpOptions options = TestOptions(ports.peers(), 1);
    options.group_epoch = 3;
    options.connect_timeout = absl::Seconds(20);
    ahead = TcpTransport::Create(options);
  });
  TcpOptions behind = TestOptions(ports.peers(), 0);
  behind.group_epoch = 2;
  behind.connect_timeout = absl::Seconds(1);
  EXPECT_THAT(TcpTransport::Create(behind),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("waiting for connections from rank 1"),
                             HasSubstr("has not re-formed yet"))));
  behind.group_epoch = 3;
  behind.connect_timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<TcpTransport>> reformed =
      TcpTransport::Create(behind);
  dialler.join();
  ASSERT_OK(reformed.status());
  ASSERT_OK(ahead.status());
  // The mesh of epoch 3 carries a message.
  const std::string text = "epoch 3";
  ASSERT_OK((*ahead)->SendControl(
      0, 7,
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>(text.data()),
                          text.size())));
  ASSERT_OK_AND_ASSIGN(
      std::vector<std::byte> got,
      (*reformed)->RecvControl(1, 7, absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()),
            text);
}

// An IPv4 address of this host that is not loopback, if it has one.
std::string NonLoopbackAddress() {
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (struct ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) {
      continue;
    }
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(it->ifa_addr);
    if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    found = text;
    break;
  }
  freeifaddrs(list);
  return found;
}

// A daemon forming a group that a later one replaced (a member died while
// it formed) stops at once, dialling or waiting to be dialled, instead of
// waiting out connect_timeout for a peer that will never come.
TEST(Mesh, FormingStopsAtOnceWhenTheGroupIsGivenUp) {
  for (const int rank : {0, 1}) {
    SCOPED_TRACE(rank == 0 ? "waiting to be dialled" : "dialling");
    // Rank 0 waits for rank 1's connection; rank 1 dials rank 0, which is
    // not there. Neither peer ever comes.
    PortReservation ports(2);
    TcpOptions options = TestOptions(ports.peers(), rank);
    options.connect_timeout = absl::Seconds(60);
    absl::Mutex mu;
    bool replaced = false;
    options.give_up = [&]() -> std::optional<std::string> {
      absl::MutexLock lock(&mu);
      if (!replaced) return std::nullopt;
      return std::string("group epoch 3 replaced group epoch 2");
    };
    absl::StatusOr<std::unique_ptr<TcpTransport>> result;
    absl::Time returned;
    std::thread forming([&] {
      result = TcpTransport::Create(options);
      returned = absl::Now();
    });
    absl::SleepFor(absl::Milliseconds(300));  // let it dial / listen
    const absl::Time given_up = absl::Now();
    {
      absl::MutexLock lock(&mu);
      replaced = true;
    }
    forming.join();
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled,
                                 HasSubstr("group epoch 3 replaced group "
                                           "epoch 2")));
    // Well within the 60 s connect_timeout.
    EXPECT_LT(returned - given_up, absl::Seconds(10));
  }
}

TEST(Mesh, NonLoopbackPeersNeedASecretOrInsecure) {
  const std::string host = NonLoopbackAddress();
  if (host.empty()) GTEST_SKIP() << "no non-loopback IPv4 address here";
  PortReservation ports(2);
  std::vector<PeerAddress> peers = ports.peers();
  for (PeerAddress& peer : peers) peer.host = host;
  auto form = [&](const std::function<void(TcpOptions&)>& tweak) {
    return CreateEachOn(peers, [&](TcpOptions& options) {
      options.listen_host = "0.0.0.0";
      options.connect_timeout = absl::Seconds(options.rank == 0 ? 1 : 5);
      tweak(options);
    });
  };
  const auto fix =
      AllOf(HasSubstr("--cluster_secret_file"), HasSubstr("--insecure"));
  // The connecting side refuses on its own.
  auto results = form([](TcpOptions&) {});
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("is not on a loopback address"), fix)));
  // The accepting side refuses an insecure peer unless insecure itself.
  results =
      form([](TcpOptions& options) { options.insecure = options.rank == 1; });
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kUnauthenticated,
                       AllOf(HasSubstr("only loopback peers are accepted"),
                             HasSubstr("connection from " + host), fix)));
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                   HasSubstr("only loopback peers")));
  results = form([](TcpOptions& options) { options.insecure = true; });
  EXPECT_OK(results[0].status());
  EXPECT_OK(results[1].status());
  results = form([](TcpOptions& options) { options.cluster_secret = "k"; });
  EXPECT_OK(results[0].status());
  EXPECT_OK(results[1].status());
}

TEST(Mesh, PreBoundListenerIsTakenOverAndClosed) {
  Listeners listeners(2);
  // The port is taken before the group forms: a clash shows up now.
  EXPECT_THAT(Listen(listeners.peers()[0], -1),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("address ", listeners.peers()[0].ToString(),
                                    " already in use")));
  ASSERT_OK_AND_ASSIGN(int port, LocalPort(listeners.fds[0].get()));
  EXPECT_EQ(port, listeners.peers()[0].port);
  ASSERT_OK_AND_ASSIGN(
      auto group, CreateGroupOn(listeners.peers(),
                                [&](TcpOptions& o) { listeners.Give(o); }));
  ExpectDataFlows(group[1].get(), group[0].get());
  // Formation over, the listening sockets are closed: the ports are free.
  for (const PeerAddress& peer : listeners.peers()) {
    EXPECT_OK(Listen(peer, -1).status());
  }
}

TEST(Mesh, ListenFdThatIsNotListeningIsInvalidArgumentAndClosed) {
  PortReservation ports(2);
  TcpOptions options = TestOptions(ports.peers(), 0);
  options.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(options.listen_fd, 0);
  EXPECT_THAT(
      TcpTransport::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not listening")));
  EXPECT_EQ(fcntl(options.listen_fd, F_GETFD), -1);
  // Bad options close it too.
  options.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  options.rank = 5;
  EXPECT_THAT(TcpTransport::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(fcntl(options.listen_fd, F_GETFD), -1);
}

}  // namespace
}  // namespace tcp
}  // namespace transport
}  // namespace starling
