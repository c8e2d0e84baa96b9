#include "server/transport/tcp/tcp_connection.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"
#include "server/transport/tcp/socket_util.h"

namespace starling {
namespace transport {
namespace tcp {

TcpConnection::TcpConnection(int fd, int epoll_fd, int peer, int index,
                             std::string name)
    : epoll_fd_(epoll_fd), peer_(peer), index_(index), name_(std::move(name)) {
  absl::MutexLock lock(&mu_);
  fd_ = fd;
  struct epoll_event event = {};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.ptr = this;
  interest_ = event.events;
  STARLING_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_, &event) == 0)
      << "epoll_ctl ADD: " << errno;
}

TcpConnection::~TcpConnection() { Close(); }

absl::StatusOr<size_t> TcpConnection::WriteSome(const struct iovec* iov,
                                                int count) {
  struct msghdr message = {};
  message.msg_iov = const_cast<struct iovec*>(iov);
  message.msg_iovlen = count;
  // Held across the (non-blocking) send so Close() cannot race it.
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(name_, " connection closed"));
  }
  while (true) {
    const ssize_t sent = sendmsg(fd_, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent >= 0) return static_cast<size_t>(sent);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return absl::UnavailableError(absl::StrCat(
        name_,
        " closed the connection: ", ErrnoStatus(errno, "send").message()));
  }
}

absl::StatusOr<size_t> TcpConnection::ReadSome(const struct iovec* iov,
                                               int count) {
  int fd;
  {
    absl::MutexLock lock(&mu_);
    fd = fd_;
  }
  while (true) {
    const ssize_t got = readv(fd, iov, count);
    if (got > 0) return static_cast<size_t>(got);
    if (got == 0) {
      return absl::UnavailableError(
          absl::StrCat(name_, " closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return absl::UnavailableError(absl::StrCat(
        name_,
        " closed the connection: ", ErrnoStatus(errno, "receive").message()));
  }
}

void TcpConnection::UpdateInterest() {
  if (fd_ < 0) return;
  // EPOLLRDHUP even while not reading, so a peer that closes while we
  // hold its data back (backpressure) is still noticed.
  const unsigned wanted = EPOLLRDHUP | (reading_ ? EPOLLIN : 0u) |
                          (writable_wanted_ ? EPOLLOUT : 0u);
  if (wanted == interest_) return;
  struct epoll_event event = {};
  event.events = wanted;
  event.data.ptr = this;
  STARLING_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd_, &event) == 0)
      << "epoll_ctl MOD: " << errno;
  interest_ = wanted;
}

void TcpConnection::WantWritable(bool want) {
  absl::MutexLock lock(&mu_);
  writable_wanted_ = want;
  UpdateInterest();
}

void TcpConnection::SetReading(bool reading) {
  absl::MutexLock lock(&mu_);
  reading_ = reading;
  UpdateInterest();
}

void TcpConnection::Shutdown(bool graceful) {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return;
  // Errors here (already disconnected) change nothing for us.
  (void)shutdown(fd_, graceful ? SHUT_WR : SHUT_RDWR);
  // The loop must see the end of stream even if reading was paused.
  reading_ = true;
  UpdateInterest();
}

bool TcpConnection::Close() {
  absl::MutexLock lock(&mu_);
  if (fd_ < 0) return false;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  close(fd_);
  fd_ = -1;
  return true;
}

bool TcpConnection::closed() const {
  absl::MutexLock lock(&mu_);
  return fd_ < 0;
}

bool TcpConnection::Drain() {
  char scratch[16384];
  int fd;
  {
    absl::MutexLock lock(&mu_);
    fd = fd_;
  }
  if (fd < 0) return false;
  for (int i = 0; i < 16; ++i) {
    const ssize_t got = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (got > 0) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (got < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
