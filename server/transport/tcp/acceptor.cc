#include "server/transport/tcp/acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/transport/auth.h"
#include "server/transport/tcp/mesh.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

// Refusals and drops logged per formation; a flood of garbage gets one line
// saying the rest are not.
constexpr int kMaxLoggedRefusals = 32;

}  // namespace

// One connection still handshaking, or sending its last handshake frame.
struct Acceptor::Pending {
  ScopedFd fd;
  std::string address;  // the peer's, for logs
  absl::Time deadline;
  std::unique_ptr<Handshaker> handshaker;
  std::vector<uint8_t> out;  // to send, from out[sent]
  size_t sent = 0;
  bool writable_wanted = false;
  // Refused: close once the ERROR is out (or cannot be sent at once).
  bool closing = false;
  // Claimed its slot; goes there once WELCOME is out.
  bool admitted = false;
};

Acceptor::Acceptor(const TcpOptions& options, int listen_fd,
                   const RankNamer& name)
    : options_(options),
      listen_fd_(listen_fd),
      name_(name),
      first_rank_(options.rank + 1),
      expected_((static_cast<int>(options.peers.size()) - 1 - options.rank) *
                options.sockets_per_peer) {
  const int higher = static_cast<int>(options.peers.size()) - first_rank_;
  claimed_.assign(higher, std::vector<bool>(options.sockets_per_peer, false));
  absl::MutexLock lock(&mu_);
  slots_.resize(higher);
  for (auto& row : slots_) row.resize(options.sockets_per_peer);
}

absl::StatusOr<std::unique_ptr<Acceptor>> Acceptor::Start(
    const TcpOptions& options, int listen_fd, const RankNamer& name) {
  std::unique_ptr<Acceptor> acceptor(new Acceptor(options, listen_fd, name));
  STARLING_RETURN_IF_ERROR(acceptor->Init());
  acceptor->thread_ = std::thread([raw = acceptor.get()] { raw->Loop(); });
  return acceptor;
}

absl::Status Acceptor::Init() {
  const int flags = fcntl(listen_fd_, F_GETFL);
  if (flags < 0 || fcntl(listen_fd_, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "fcntl O_NONBLOCK on the listening socket");
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) return ErrnoStatus(errno, "epoll_create1");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return ErrnoStatus(errno, "eventfd");
  for (int fd : {wake_fd_, listen_fd_}) {
    struct epoll_event event = {};
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      return ErrnoStatus(errno, "epoll_ctl");
    }
  }
  return absl::OkStatus();
}

Acceptor::~Acceptor() {
  if (thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    // A full counter (impossible here) still wakes the loop.
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  // Handshakes still running when the mesh formed (or failed): strangers,
  // or a peer too slow to prove itself. Said, then closed.
  for (auto& [fd, pending] : pending_) {
    if (pending->closing) continue;
    std::string who;
    if (pending->handshaker->hello_checked()) {
      who = absl::StrCat(
          " claiming to be ",
          name_(static_cast<int>(pending->handshaker->remote().sender_rank)));
    }
    NoteRefusal(pending->address + who,
                absl::UnavailableError(
                    "its handshake had not finished when the mesh was "
                    "complete"),
                "closed");
  }
  pending_.clear();  // closes the connections
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

absl::Status Acceptor::Wait(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return filled_ == expected_ || !error_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (!error_.ok()) return error_;
  if (filled_ == expected_) return absl::OkStatus();
  std::vector<std::string> absent;
  for (size_t i = 0; i < slots_.size(); ++i) {
    for (const ScopedFd& fd : slots_[i]) {
      if (!fd.valid()) {
        absent.push_back(name_(first_rank_ + static_cast<int>(i)));
        break;
      }
    }
  }
  return absl::DeadlineExceededError(absl::StrCat(
      name_(options_.rank), " gave up after ",
      absl::FormatDuration(options_.connect_timeout),
      " waiting for connections from ", absl::StrJoin(absent, ", "),
      last_refusal_.ok()
          ? ""
          : absl::StrCat("; last refused: ", last_refusal_.message())));
}

void Acceptor::TakeConnections(std::vector<std::vector<ScopedFd>>* mesh) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < slots_.size(); ++i) {
    for (size_t s = 0; s < slots_[i].size(); ++s) {
      (*mesh)[first_rank_ + i][s] = std::move(slots_[i][s]);
    }
  }
}

void Acceptor::Loop() {
  constexpr int kMaxEvents = 64;
  struct epoll_event events[kMaxEvents];
  while (true) {
    // Sleep until the next handshake deadline at the latest.
    int timeout_ms = -1;
    if (!pending_.empty()) {
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [fd, pending] : pending_) {
        next = std::min(next, pending->deadline);
      }
      const absl::Duration left = next - absl::Now();
      timeout_ms = left <= absl::ZeroDuration()
                       ? 0
                       : static_cast<int>(std::min<int64_t>(
                             absl::ToInt64Milliseconds(left) + 1, 60000));
    }
    const int n = epoll_wait(epoll_fd_, events, kMaxEvents, timeout_ms);
    if (n < 0) {
      STARLING_CHECK(errno == EINTR) << "epoll_wait: " << errno;
      continue;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        continue;
      }
      if (fd == listen_fd_) {
        AcceptAll();
        continue;
      }
      auto it = pending_.find(fd);
      if (it != pending_.end()) Serve(it->second.get(), events[i].events);
    }
    ExpireHandshakes();
  }
}

void Acceptor::AcceptAll() {
  while (true) {
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      switch (err) {
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
          return;
        // accept(2): network errors of the new connection; try the next.
        case EINTR:
        case ECONNABORTED:
        case EPROTO:
        case ENETDOWN:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case EOPNOTSUPP:
        case ENETUNREACH:
          continue;
        default:
          break;
      }
      const absl::Status status = ErrnoStatus(
          err, absl::StrCat(name_(options_.rank), " accepting connections"));
      if ((err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) &&
          !pending_.empty()) {
        // Out of descriptors: the oldest handshake makes room.
        if (Pending* oldest = OldestUnadmitted(); oldest != nullptr) {
          Drop(oldest, status);
          continue;
        }
      }
      // Nothing to free: formation fails with this error.
      epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = status;
      return;
    }
    ScopedFd owned(fd);
    absl::StatusOr<RemoteEndpoint> endpoint = GetRemoteEndpoint(fd);
    if (!endpoint.ok()) continue;  // gone already
    absl::StatusOr<Nonce> nonce = RandomNonce();
    if (!nonce.ok()) {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = nonce.status();
      return;
    }
    if (pending_.size() >= kMaxPendingHandshakes) {
      if (Pending* oldest = OldestUnadmitted(); oldest != nullptr) {
        Drop(oldest,
             absl::ResourceExhaustedError(absl::StrCat(
                 "dropped for a newer one: more than ", kMaxPendingHandshakes,
                 " connections were handshaking at once")));
      }
    }
    auto pending = std::make_unique<Pending>();
    pending->address = endpoint->address;
    pending->deadline = absl::Now() + options_.handshake_timeout;
    HandshakeConfig config =
        HandshakeConfigFor(options_, HandshakeConfig::Role::kAccept, name_);
    config.peer_is_loopback = endpoint->loopback;
    config.peer_address = endpoint->address;
    config.nonce = *nonce;
    pending->handshaker = std::make_unique<Handshaker>(std::move(config));
    struct epoll_event event = {};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      STARLING_LOG(WARNING) << name_(options_.rank) << " dropped a connection"
                            << " from " << pending->address << ": "
                            << ErrnoStatus(errno, "epoll_ctl");
      continue;
    }
    pending->fd = std::move(owned);
    pending_[fd] = std::move(pending);
  }
}

Acceptor::Pending* Acceptor::OldestUnadmitted() {
  Pending* oldest = nullptr;
  for (auto& [fd, pending] : pending_) {
    if (pending->admitted) continue;
    if (oldest == nullptr || pending->deadline < oldest->deadline) {
      oldest = pending.get();
    }
  }
  return oldest;
}

void Acceptor::Serve(Pending* pending, uint32_t events) {
  if ((events & EPOLLOUT) && !Flush(pending)) return;
  Handshaker& handshaker = *pending->handshaker;
  if (handshaker.state() == Handshaker::State::kRunning &&
      (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
    // Read exactly what the handshake wants, so that no data-plane byte
    // behind it is consumed here.
    uint8_t buffer[kFrameHeaderBytes + kMaxErrorMessageBytes];
    while (handshaker.state() == Handshaker::State::kRunning) {
      const size_t want = std::min(handshaker.BytesWanted(), sizeof(buffer));
      const ssize_t n = recv(pending->fd.get(), buffer, want, MSG_DONTWAIT);
      if (n > 0) {
        absl::Status status = handshaker.Consume(buffer, n, &pending->out);
        if (!status.ok()) {
          NoteRefusal(pending->address, status, "refused");
          pending->closing = true;
        }
        continue;
      }
      if (n == 0) {
        Drop(pending, absl::UnavailableError(
                          "closed the connection during the handshake"));
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Drop(pending, ErrnoStatus(errno, "receive"));
      return;
    }
    if (handshaker.state() == Handshaker::State::kAuthenticated) {
      const int rank = static_cast<int>(handshaker.remote().sender_rank);
      const int socket = static_cast<int>(handshaker.remote().socket_index);
      std::vector<bool>::reference claimed =
          claimed_[rank - first_rank_][socket];
      if (claimed) {
        const absl::Status refused = absl::FailedPreconditionError(
            absl::StrCat(name_(rank), " is already connected to ",
                         name_(options_.rank), " on socket ", socket,
                         ": refused another connection claiming it, from ",
                         pending->address));
        handshaker.Refuse(refused, &pending->out);
        NoteRefusal(pending->address, refused, "refused");
        pending->closing = true;
      } else {
        claimed = true;
        pending->admitted = true;
        handshaker.Admit(&pending->out);
      }
    }
  }
  Flush(pending);
}

bool Acceptor::Flush(Pending* pending) {
  while (pending->sent < pending->out.size()) {
    const ssize_t n =
        send(pending->fd.get(), pending->out.data() + pending->sent,
             pending->out.size() - pending->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      pending->sent += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        !pending->closing) {
      SetInterest(pending, true);
      return true;
    }
    if (pending->closing) {
      // The refusal was logged; telling the peer is best effort.
      Drop(pending, absl::OkStatus());
    } else {
      Drop(pending, ErrnoStatus(errno, "send"));
    }
    return false;
  }
  pending->out.clear();
  pending->sent = 0;
  if (pending->writable_wanted) SetInterest(pending, false);
  if (pending->closing) {
    Drop(pending, absl::OkStatus());
    return false;
  }
  if (pending->admitted &&
      pending->handshaker->state() == Handshaker::State::kDone) {
    Finish(pending);
    return false;
  }
  return true;
}

void Acceptor::Finish(Pending* pending) {
  const int rank = static_cast<int>(pending->handshaker->remote().sender_rank);
  const int socket =
      static_cast<int>(pending->handshaker->remote().socket_index);
  const int fd = pending->fd.get();
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  {
    absl::MutexLock lock(&mu_);
    slots_[rank - first_rank_][socket] = std::move(pending->fd);
    ++filled_;
  }
  pending_.erase(fd);
}

void Acceptor::Drop(Pending* pending, const absl::Status& why) {
  if (!why.ok()) {
    absl::Status status = why;
    if (pending->handshaker->hello_checked()) {
      status = absl::Status(
          why.code(),
          absl::StrCat(name_(static_cast<int>(
                           pending->handshaker->remote().sender_rank)),
                       " (or someone claiming to be it): ", why.message()));
    }
    NoteRefusal(pending->address, status, "dropped");
  }
  if (pending->admitted) {
    const Hello& remote = pending->handshaker->remote();
    claimed_[remote.sender_rank - first_rank_][remote.socket_index] = false;
  }
  const int fd = pending->fd.get();
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  pending_.erase(fd);
}

void Acceptor::ExpireHandshakes() {
  const absl::Time now = absl::Now();
  std::vector<Pending*> expired;
  for (auto& [fd, pending] : pending_) {
    if (pending->deadline <= now) expired.push_back(pending.get());
  }
  for (Pending* pending : expired) {
    Drop(pending, absl::DeadlineExceededError(absl::StrCat(
                      "no handshake within ",
                      absl::FormatDuration(options_.handshake_timeout))));
  }
}

void Acceptor::NoteRefusal(const std::string& address, const absl::Status& why,
                           const char* what) {
  {
    absl::MutexLock lock(&mu_);
    last_refusal_ = why;
  }
  if (refusals_logged_ < kMaxLoggedRefusals) {
    STARLING_LOG(WARNING) << name_(options_.rank) << " " << what
                          << " a connection from " << address << ": " << why;
  } else if (refusals_logged_ == kMaxLoggedRefusals) {
    STARLING_LOG(WARNING) << name_(options_.rank) << " refused or dropped "
                          << kMaxLoggedRefusals
                          << " connections; not logging further ones";
  }
  ++refusals_logged_;
}

void Acceptor::SetInterest(Pending* pending, bool writable) {
  // While output waits, only writability (and hang-ups, always reported)
  // matter: the peer speaks after it has read what we send.
  struct epoll_event event = {};
  event.events = writable ? EPOLLOUT : (EPOLLIN | EPOLLRDHUP);
  event.data.fd = pending->fd.get();
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, pending->fd.get(), &event);
  pending->writable_wanted = writable;
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
