// ScopedFd: owns a file descriptor and closes it on destruction, so that no
// error path leaks one and no descriptor is closed twice. Move-only;
// thread-compatible.
#ifndef STARLING_SERVER_BASE_SCOPED_FD_H_
#define STARLING_SERVER_BASE_SCOPED_FD_H_

namespace starling {

class ScopedFd {
 public:
  ScopedFd() = default;
  // Takes `fd` (-1: none).
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  // Closes the one held, takes `other`'s.
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }
  // Hands the descriptor to the caller (-1 if none); this holds none after.
  int release();
  // Closes the one held now, if any.
  void reset() { *this = ScopedFd(); }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace starling

#endif  // STARLING_SERVER_BASE_SCOPED_FD_H_
