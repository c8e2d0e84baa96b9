#include "server/transport/tcp/socket_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

// Milliseconds until `deadline` for poll(), at least 0, at most a minute.
int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000));
}

// Waits for `events` on `fd`; false on time out.
absl::StatusOr<bool> WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    struct pollfd p = {fd, events, 0};
    const int timeout = PollTimeoutMs(deadline);
    const int rc = poll(&p, 1, timeout);
    if (rc > 0) return true;
    if (rc == 0) {
      if (absl::Now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) return ErrnoStatus(errno, "poll");
  }
}

absl::StatusOr<struct sockaddr_storage> Resolve(const PeerAddress& address,
                                                socklen_t* length) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* result = nullptr;
  const std::string port = absl::StrCat(address.port);
  const int rc =
      getaddrinfo(address.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot resolve ", address.ToString(), ": ", gai_strerror(rc)));
  }
  struct sockaddr_storage storage;
  std::memset(&storage, 0, sizeof(storage));
  std::memcpy(&storage, result->ai_addr, result->ai_addrlen);
  *length = result->ai_addrlen;
  freeaddrinfo(result);
  return storage;
}

}  // namespace

absl::Status ErrnoStatus(int err, absl::string_view what) {
  char buffer[128];
  // GNU strerror_r returns the message pointer.
  const char* text = strerror_r(err, buffer, sizeof(buffer));
  const std::string message = absl::StrCat(what, ": ", text);
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRINUSE:
      return absl::UnavailableError(message);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(message);
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<ScopedFd> Listen(const PeerAddress& address, int rank) {
  socklen_t length = 0;
  auto storage = Resolve(address, &length);
  if (!storage.ok()) return storage.status();
  ScopedFd fd(socket(storage->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket");
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const std::string whose =
      rank >= 0 ? absl::StrCat(" (rank ", rank, ")") : std::string();
  if (bind(fd.get(), reinterpret_cast<struct sockaddr*>(&*storage), length) !=
      0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      return absl::UnavailableError(absl::StrCat("address ", address.ToString(),
                                                 " already in use", whose));
    }
    return ErrnoStatus(err, absl::StrCat("bind ", address.ToString(), whose));
  }
  if (listen(fd.get(), 1024) != 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      return absl::UnavailableError(absl::StrCat("address ", address.ToString(),
                                                 " already in use", whose));
    }
    return ErrnoStatus(err, absl::StrCat("listen on ", address.ToString()));
  }
  return fd;
}

absl::Status CheckListening(int fd) {
  int listening = 0;
  socklen_t length = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0) {
    char buffer[128];
    return absl::InvalidArgumentError(absl::StrCat(
        "listen_fd ", fd,
        " is not a socket: ", strerror_r(errno, buffer, sizeof(buffer))));
  }
  if (!listening) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen_fd ", fd, " is a socket that is not listening"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> LocalPort(int fd) {
  struct sockaddr_storage storage;
  socklen_t length = sizeof(storage);
  if (getsockname(fd, reinterpret_cast<struct sockaddr*>(&storage), &length) !=
      0) {
    return ErrnoStatus(errno, "getsockname");
  }
  if (storage.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<struct sockaddr_in*>(&storage)->sin_port);
  }
  if (storage.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<struct sockaddr_in6*>(&storage)->sin6_port);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("socket ", fd, " is not an IP socket"));
}

absl::StatusOr<RemoteEndpoint> GetRemoteEndpoint(int fd) {
  struct sockaddr_storage storage;
  socklen_t length = sizeof(storage);
  if (getpeername(fd, reinterpret_cast<struct sockaddr*>(&storage), &length) !=
      0) {
    return absl::UnavailableError(absl::StrCat(
        "peer address unknown: ", ErrnoStatus(errno, "getpeername").message()));
  }
  RemoteEndpoint endpoint;
  char text[INET6_ADDRSTRLEN] = "?";
  if (storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const struct sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    endpoint.address = absl::StrCat(text, ":", ntohs(in->sin_port));
    endpoint.loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  } else if (storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const struct sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    endpoint.address = absl::StrCat("[", text, "]:", ntohs(in6->sin6_port));
    endpoint.loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
                        (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) &&
                         in6->sin6_addr.s6_addr[12] == 127);
  } else {
    endpoint.address = absl::StrCat("(address family ", storage.ss_family, ")");
  }
  return endpoint;
}

absl::StatusOr<ScopedFd> ConnectWithRetry(const PeerAddress& address,
                                          absl::string_view who,
                                          absl::Time deadline,
                                          absl::Duration initial_backoff,
                                          absl::Duration max_backoff) {
  socklen_t length = 0;
  auto storage = Resolve(address, &length);
  if (!storage.ok()) return storage.status();
  absl::Duration backoff = initial_backoff;
  absl::Status last = absl::UnavailableError("no attempt made");
  int attempts = 0;
  while (true) {
    ++attempts;
    ScopedFd fd(socket(storage->ss_family,
                       SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoStatus(errno, "socket");
    int rc = connect(fd.get(), reinterpret_cast<struct sockaddr*>(&*storage),
                     length);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      auto ready = WaitFor(fd.get(), POLLOUT, deadline);
      if (!ready.ok()) return ready.status();
      if (!*ready) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) {
      // Back to blocking for the handshake.
      const int flags = fcntl(fd.get(), F_GETFL);
      fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
      return fd;
    }
    last = ErrnoStatus(err, absl::StrCat("connect to ", who));
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH &&
        err != ENETUNREACH && err != ECONNRESET && err != EAGAIN) {
      return last;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("could not connect to ", who, " after ", attempts,
                       " attempt(s): ", last.message()));
    }
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, max_backoff);
  }
}

absl::StatusOr<ScopedFd> AcceptUntil(int listen_fd, absl::Time deadline) {
  while (true) {
    auto ready = WaitFor(listen_fd, POLLIN, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) return absl::DeadlineExceededError("accept timed out");
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return ScopedFd(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
      return ErrnoStatus(errno, "accept");
    }
  }
}

absl::Status SendAllUntil(int fd, const void* data, size_t n,
                          absl::Time deadline, absl::string_view who) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    auto ready = WaitFor(fd, POLLOUT, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) {
      return absl::DeadlineExceededError(
          absl::StrCat("send to ", who, " timed out"));
    }
    const ssize_t rc = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(errno, absl::StrCat("send to ", who));
    }
    p += rc;
    n -= rc;
  }
  return absl::OkStatus();
}

absl::Status RecvAllUntil(int fd, void* data, size_t n, absl::Time deadline,
                          absl::string_view who) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    auto ready = WaitFor(fd, POLLIN, deadline);
    if (!ready.ok()) return ready.status();
    if (!*ready) {
      return absl::DeadlineExceededError(
          absl::StrCat(who, " did not answer in time"));
    }
    const ssize_t rc = recv(fd, p, n, MSG_DONTWAIT);
    if (rc == 0) {
      return absl::UnavailableError(
          absl::StrCat(who, " closed the connection"));
    }
    if (rc < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(errno, absl::StrCat("receive from ", who));
    }
    p += rc;
    n -= rc;
  }
  return absl::OkStatus();
}

absl::Status ConfigureDataSocket(int fd, int send_buffer_bytes,
                                 int recv_buffer_bytes) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "fcntl O_NONBLOCK");
  }
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoStatus(errno, "setsockopt TCP_NODELAY");
  }
  if (send_buffer_bytes > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_buffer_bytes,
                 sizeof(send_buffer_bytes)) != 0) {
    return ErrnoStatus(errno, "setsockopt SO_SNDBUF");
  }
  if (recv_buffer_bytes > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &recv_buffer_bytes,
                 sizeof(recv_buffer_bytes)) != 0) {
    return ErrnoStatus(errno, "setsockopt SO_RCVBUF");
  }
  return absl::OkStatus();
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
