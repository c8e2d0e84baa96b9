#include "server/base/framed_socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace {

absl::Status Errno(absl::string_view what) {
  const int e = errno;
  if (e == EPIPE || e == ECONNRESET) {
    return absl::UnavailableError(
        absl::StrCat(what, ": peer closed the connection (", strerror(e), ")"));
  }
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(e)));
}

// Sends everything in `iov` (modified in place); the first sendmsg() carries
// `pass_fd` when >= 0.
absl::Status SendAll(int fd, iovec* iov, int iov_count, int pass_fd) {
  char control[CMSG_SPACE(sizeof(int))];
  bool fd_pending = pass_fd >= 0;
  while (iov_count > 0) {
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = iov_count;
    if (fd_pending) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("sending a frame");
    }
    fd_pending = false;
    size_t left = static_cast<size_t>(n);
    while (iov_count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --iov_count;
    }
    if (iov_count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return absl::OkStatus();
}

// Reads exactly `length` bytes; collects a passed descriptor into *got_fd.
absl::Status RecvAll(int fd, char* data, size_t length, ScopedFd* got_fd,
                     bool* eof_at_start) {
  size_t done = 0;
  *eof_at_start = false;
  while (done < length) {
    iovec iov = {data + done, length - done};
    char control[CMSG_SPACE(sizeof(int))];
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        // The socket's receive timeout (SO_RCVTIMEO) passed.
        return absl::DeadlineExceededError(absl::StrCat(
            "nothing to read within the socket's receive timeout (", done,
            " of ", length, " bytes read)"));
      }
      return Errno("reading a frame");
    }
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr;
         cmsg = CMSG_NXTHDR(&msg, cmsg)) {
      if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(cmsg), sizeof(int));
        *got_fd = ScopedFd(passed);  // a second one closes the first
      }
    }
    if (n == 0) {
      if (done == 0) *eof_at_start = true;
      return absl::UnavailableError(
          done == 0 ? "connection closed"
                    : absl::StrCat("connection closed inside a frame (after ",
                                   done, " of ", length, " bytes)"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, absl::string_view payload, int pass_fd) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", payload.size(),
                     " bytes exceeds the limit of ", kMaxFrameBytes, " bytes"));
  }
  const uint32_t length = static_cast<uint32_t>(payload.size());
  unsigned char header[4] = {static_cast<unsigned char>(length),
                             static_cast<unsigned char>(length >> 8),
                             static_cast<unsigned char>(length >> 16),
                             static_cast<unsigned char>(length >> 24)};
  iovec iov[2] = {{header, sizeof(header)},
                  {const_cast<char*>(payload.data()), payload.size()}};
  return SendAll(fd, iov, payload.empty() ? 1 : 2, pass_fd);
}

absl::StatusOr<Frame> ReadFrame(int fd) {
  Frame frame;
  unsigned char header[4];
  bool eof_at_start = false;
  absl::Status status =
      RecvAll(fd, reinterpret_cast<char*>(header), sizeof(header),
              &frame.received_fd, &eof_at_start);
  if (!status.ok()) return status;
  const uint32_t length = uint32_t{header[0]} | uint32_t{header[1]} << 8 |
                          uint32_t{header[2]} << 16 | uint32_t{header[3]} << 24;
  if (length > kMaxFrameBytes) {
    // Another protocol's first bytes are telling ("HTTP", "SSH-").
    return absl::DataLossError(
        absl::StrCat("frame length ", length, " bytes exceeds the limit of ",
                     kMaxFrameBytes, " bytes (its 4 header bytes: \"",
                     absl::CHexEscape(absl::string_view(
                         reinterpret_cast<char*>(header), sizeof(header))),
                     "\")"));
  }
  frame.payload.resize(length);
  status = RecvAll(fd, frame.payload.data(), length, &frame.received_fd,
                   &eof_at_start);
  if (!status.ok()) {
    if (eof_at_start && length > 0) {
      return absl::UnavailableError(absl::StrCat(
          "connection closed inside a frame (after the header of a ", length,
          "-byte frame)"));
    }
    return status;
  }
  return frame;
}

}  // namespace starling
