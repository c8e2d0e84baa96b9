#include "server/base/scoped_fd.h"

#include <unistd.h>

namespace starling {

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

int ScopedFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

}  // namespace starling
