#include "server/transport/tcp/tcp_transport.h"

#include <errno.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/transport/auth.h"
#include "server/transport/tcp/mesh.h"
#include "server/transport/tcp/socket_util.h"
#include "server/transport/tcp/tcp_connection.h"

namespace starling {
namespace transport {
namespace tcp {

// Everything about one remote rank.
struct TcpTransport::Peer {
  std::vector<std::unique_ptr<TcpConnection>> connections;
  WriteTracker tracker;  // striped writes
  // Next write sequence number (frame_format.md); relaxed: only uniqueness
  // and per-thread post order matter.
  std::atomic<uint32_t> next_seq{0};
};

namespace {

absl::Status ValidateOptions(const TcpOptions& options) {
  const int size = options.peers.size();
  if (size < 1) return absl::InvalidArgumentError("peer list is empty");
  if (options.rank < 0 || options.rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in the group of ", size));
  }
  if (options.sockets_per_peer < 1 || options.sockets_per_peer > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sockets_per_peer is ", options.sockets_per_peer, ", need 1..64"));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("connect_timeout must be positive");
  }
  if (options.handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("handshake_timeout must be positive");
  }
  if (options.group_key.size() > kMaxClusterSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_key holds ", options.group_key.size(),
                     " bytes, more than ", kMaxClusterSecretBytes));
  }
  if (options.cluster_secret.size() > kMaxClusterSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster_secret holds ", options.cluster_secret.size(),
                     " bytes, more than ", kMaxClusterSecretBytes));
  }
  return absl::OkStatus();
}

// Striped parts are multiples of this many bytes (except the last).
constexpr size_t kStripeAlignBytes = 4096;

}  // namespace

TcpTransport::TcpTransport(const TcpOptions& options)
    : InboxTransport(
          Inbox::Options{
              options.rank, static_cast<int>(options.peers.size()),
              options.max_early_bytes, [this](int r) { return PeerName(r); },
              [this](int peer, const absl::Status& why) {
                // The inbox already made `why` sticky; tell the peer.
                FailPeer(peer, why, /*tell_peer=*/true, /*orderly=*/false);
              },
              [this] { Wake(); }, options.wait_spin},
          options.max_control_bytes),
      options_(options) {}

absl::StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(
    const TcpOptions& options) {
  // Owned from here on, whatever happens.
  ScopedFd listener(options.listen_fd);
  STARLING_RETURN_IF_ERROR(ValidateOptions(options));
  if (listener.valid()) {
    STARLING_RETURN_IF_ERROR(CheckListening(listener.get()));
  } else {
    PeerAddress listen_address = options.peers[options.rank];
    if (!options.listen_host.empty()) listen_address.host = options.listen_host;
    STARLING_ASSIGN_OR_RETURN(listener, Listen(listen_address, options.rank));
  }
  std::unique_ptr<TcpTransport> transport(new TcpTransport(options));
  STARLING_RETURN_IF_ERROR(transport->Start(listener.get()));
  return transport;
}

std::string TcpTransport::PeerName(int rank) const {
  if (rank < 0 || rank >= size()) return absl::StrCat("rank ", rank);
  return absl::StrCat("rank ", rank, " (", options_.peers[rank].ToString(),
                      ")");
}

absl::Status TcpTransport::Start(int listen_fd) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return ErrnoStatus(errno, "epoll_create1");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoStatus(errno, "eventfd");
  struct epoll_event event = {};
  event.events = EPOLLIN;
  event.data.ptr = nullptr;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event) != 0) {
    return ErrnoStatus(errno, "epoll_ctl");
  }
  auto name = [this](int r) { return PeerName(r); };
  STARLING_ASSIGN_OR_RETURN(auto mesh, FormMesh(options_, listen_fd, name));
  peers_.resize(size());
  for (int r = 0; r < size(); ++r) {
    peers_[r] = std::make_unique<Peer>();
    if (r == rank()) continue;
    for (int s = 0; s < options_.sockets_per_peer; ++s) {
      ScopedFd& fd = mesh[r][s];
      STARLING_RETURN_IF_ERROR(
          ConfigureDataSocket(fd.get(), options_.socket_send_buffer_bytes,
                              options_.socket_recv_buffer_bytes));
      auto connection = std::make_unique<TcpConnection>(fd.release(), epoll_fd_,
                                                        r, s, PeerName(r));
      connection->sender =
          std::make_unique<FrameSender>(connection.get(), &peers_[r]->tracker);
      connection->receiver = std::make_unique<FrameReceiver>(
          r, name, inbox(), options_.max_control_bytes);
      peers_[r]->connections.push_back(std::move(connection));
    }
  }
  {
    absl::MutexLock lock(&closed_mu_);
    open_connections_ = (size() - 1) * options_.sockets_per_peer;
  }
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

TcpTransport::~TcpTransport() {
  BeginShutdown();
  // Writes posted over a path land before GOODBYE tells peers we are gone.
  DrainWritePaths(absl::Now() + options_.shutdown_timeout);
  if (loop_.joinable()) {
    // Say GOODBYE; each peer answers by closing, and the loop closes our end
    // when it sees that.
    FrameHeader goodbye;
    goodbye.type = FrameType::kGoodbye;
    for (auto& peer : peers_) {
      for (auto& connection : peer->connections) {
        if (connection->sender->PostFrame(goodbye, {}).ok()) {
          connection->sender->ShutdownWhenFlushed();
        }
      }
    }
    {
      const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
      absl::MutexLock lock(&closed_mu_);
      while (open_connections_ > 0) {
        if (closed_cv_.WaitWithDeadline(&closed_mu_, deadline)) break;
      }
      if (open_connections_ > 0) {
        STARLING_LOG(WARNING)
            << PeerName(rank()) << " shut down with " << open_connections_
            << " connection(s) not closed by their peer within "
            << absl::FormatDuration(options_.shutdown_timeout);
      }
    }
    stopping_.store(true, std::memory_order_relaxed);
    Wake();
    loop_.join();
  }
  StopWritePaths();
  inbox()->Shutdown();
  const absl::Status why = absl::FailedPreconditionError(
      absl::StrCat(PeerName(rank()), " shut its transport down"));
  for (auto& peer : peers_) {
    for (auto& connection : peer->connections) {
      connection->sender->Fail(why);
      connection->receiver->Abandon();
      connection->Close();
    }
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void TcpTransport::Wake() {
  const uint64_t one = 1;
  // A full counter (impossible in practice) still wakes the loop.
  (void)!write(wake_fd_, &one, sizeof(one));
}

void TcpTransport::Loop() {
  constexpr int kMaxEvents = 64;
  struct epoll_event events[kMaxEvents];
  // The poll pays off when the next frame completes soon: a small op's
  // next message. A batch that flushed a sending queue, or left a frame
  // with more than kBulkPayloadBytes still to come, is bulk traffic, whose
  // wake-ups are few per byte: the loop then sleeps at once instead of
  // spending a core between its reads (8 hosts, 1e7 floats: 0.24 cores per
  // rank polling against 0.12 sleeping, for the same time).
  constexpr uint64_t kBulkPayloadBytes = 64 * 1024;
  const bool spins = options_.loop_spin > absl::ZeroDuration();
  absl::Time spin_until = absl::InfinitePast();
  while (true) {
    const bool polling = spins && absl::Now() < spin_until;
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, polling ? 0 : -1);
    if (n < 0) {
      STARLING_CHECK(errno == EINTR) << "epoll_wait: " << errno;
      continue;
    }
    if (n == 0) {
      // Polling: another thread (a peer rank's, with more ranks than
      // cores) may need this core to send what we wait for.
      sched_yield();
      continue;
    }
    bool bulk = false;
    for (int i = 0; i < n; ++i) {
      auto* connection = static_cast<TcpConnection*>(events[i].data.ptr);
      if (connection == nullptr) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        if (stopping_.load(std::memory_order_relaxed)) return;
        HandleWakeup();
        continue;
      }
      if (connection->closed()) continue;
      const uint32_t what = events[i].events;
      if ((what & EPOLLOUT) &&
          !connection->dead.load(std::memory_order_acquire)) {
        bulk = true;
        absl::Status flushed = connection->sender->Flush();
        if (!flushed.ok()) {
          FailPeer(connection->peer(), flushed, false, false,
                   /*vanished=*/true);
        }
      }
      if (what & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
        HandleReadable(connection, what);
        if (connection->receiver->payload_bytes_to_come() > kBulkPayloadBytes) {
          bulk = true;
        }
      }
    }
    if (spins) {
      spin_until =
          bulk ? absl::InfinitePast() : absl::Now() + options_.loop_spin;
    }
  }
}

void TcpTransport::HandleReadable(TcpConnection* connection, uint32_t events) {
  const int peer = connection->peer();
  if (connection->dead.load(std::memory_order_acquire)) {
    connection->receiver->Abandon();
    if (!connection->Drain()) CloseConnection(connection);
    return;
  }
  if (connection->receiver->paused()) {
    if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) == 0) return;
    // The peer hung up while we held its data back.
    FailPeer(peer,
             absl::UnavailableError(
                 absl::StrCat(PeerName(peer), " closed the connection")),
             false, false, /*vanished=*/true);
    connection->receiver->Abandon();
    if (!connection->Drain()) CloseConnection(connection);
    return;
  }
  FrameReceiver::Result result = connection->receiver->Receive(connection);
  if (!result.error.ok()) {
    FailPeer(peer, result.error, result.send_error, result.orderly,
             result.vanished);
    connection->receiver->Abandon();
    if (!connection->Drain()) CloseConnection(connection);
    return;
  }
  if (result.paused) connection->SetReading(false);
}

void TcpTransport::HandleWakeup() {
  // A registration or deregistration happened, or a peer failed: resume
  // paused connections, stop landing into leaving regions, and release
  // the landings of dead connections.
  for (auto& peer : peers_) {
    for (auto& connection : peer->connections) {
      if (connection->closed()) continue;
      FrameReceiver* receiver = connection->receiver.get();
      if (connection->dead.load(std::memory_order_acquire)) {
        receiver->Abandon();
        continue;
      }
      receiver->RecheckLanding();
      if (!receiver->paused()) continue;
      FrameReceiver::Result result = receiver->Resume();
      if (!result.error.ok()) {
        FailPeer(connection->peer(), result.error, result.send_error, false);
        continue;
      }
      if (!result.paused) {
        connection->SetReading(true);
        HandleReadable(connection.get(), EPOLLIN);
      }
    }
  }
}

void TcpTransport::CloseConnection(TcpConnection* connection) {
  if (!connection->Close()) return;
  absl::MutexLock lock(&closed_mu_);
  --open_connections_;
  closed_cv_.SignalAll();
}

void TcpTransport::FailPeer(int peer, const absl::Status& why, bool tell_peer,
                            bool orderly) {
  FailPeer(peer, why, tell_peer, orderly, /*vanished=*/false);
}

void TcpTransport::FailPeer(int peer, const absl::Status& why, bool tell_peer,
                            bool orderly, bool vanished) {
  const bool first = inbox()->FailPeer(peer, why);
  if (first && vanished && options_.on_peer_vanished) {
    options_.on_peer_vanished(peer, why);
  }
  const absl::Status sticky = first ? why : inbox()->PeerStatus(peer);
  if (first || tell_peer) LogPeerFailure(peer, sticky, orderly);
  FailWritePath(peer, sticky);
  // Every connection carries the ERROR: the peer may read any of them first
  // and must learn why (a rejected write is DataLoss there too), not just see
  // a connection close.
  const std::string message =
      tell_peer ? std::string(sticky.message()) : std::string();
  for (auto& connection : peers_[peer]->connections) {
    connection->sender->Fail(sticky, message);
    // Release: the loop's acquire load sees the failed sender.
    connection->dead.store(true, std::memory_order_release);
  }
  Wake();
}

void TcpTransport::PostWrite(int peer, absl::Span<const std::byte> data,
                             RegionId remote, uint64_t remote_offset_bytes,
                             uint32_t imm, Completion* done) {
  Peer& target = *peers_[peer];
  const uint32_t seq = target.next_seq.fetch_add(1, std::memory_order_relaxed);
  const size_t connections = target.connections.size();
  FrameHeader header =
      WriteFrameHeader(remote, remote_offset_bytes, data.size(), imm, seq);
  absl::Status status;
  if (connections == 1 || data.size() < options_.stripe_min_bytes) {
    status = target.connections[seq % connections]->sender->PostWrite(
        header, data.data(), done);
  } else {
    size_t part = (data.size() + connections - 1) / connections;
    part =
        (part + kStripeAlignBytes - 1) / kStripeAlignBytes * kStripeAlignBytes;
    const size_t parts = (data.size() + part - 1) / part;
    header.part_count = static_cast<uint8_t>(parts);
    target.tracker.Begin(seq, done, parts);
    for (size_t i = 0; i < parts; ++i) {
      const size_t begin = i * part;
      header.offset = remote_offset_bytes + begin;
      header.length = std::min(part, data.size() - begin);
      absl::Status posted =
          target.connections[(seq + i) % connections]->sender->PostWrite(
              header, data.data() + begin, done);
      if (status.ok()) status = posted;
    }
  }
  if (!status.ok()) FailPeer(peer, status, false, false);
}

absl::Status TcpTransport::PostControlThenWrite(
    int peer, const FrameHeader& control, std::vector<std::byte> message,
    absl::Span<const std::byte> data, RegionId remote,
    uint64_t remote_offset_bytes, uint32_t imm, Completion* done) {
  Peer& target = *peers_[peer];
  if (target.connections.size() != 1) {
    // The write may take another connection than the control messages'.
    return InboxTransport::PostControlThenWrite(
        peer, control, std::move(message), data, remote, remote_offset_bytes,
        imm, done);
  }
  const FrameHeader header =
      WriteFrameHeader(remote, remote_offset_bytes, data.size(), imm,
                       target.next_seq.fetch_add(1, std::memory_order_relaxed));
  return target.connections[0]->sender->PostFrameThenWrite(
      control, std::move(message), header, data.data(), done);
}

absl::Status TcpTransport::PostControl(int peer, const FrameHeader& header,
                                       std::vector<std::byte> message) {
  return peers_[peer]->connections[0]->sender->PostFrame(header,
                                                         std::move(message));
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
