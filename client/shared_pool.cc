#include "client/shared_pool.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace starling {
namespace client {

absl::StatusOr<std::unique_ptr<SharedPool>> SharedPool::Create(size_t bytes) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("pool_bytes must be > 0");
  }
  ScopedFd fd(
      ::memfd_create("starling-client-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "memfd_create for the shared-memory pool: ", strerror(errno)));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("sizing the shared-memory pool to ", bytes,
                     " bytes: ", strerror(errno)));
  }
  // The daemon maps the pool too: sealed against changing size, so that
  // nothing (not this process either) can pull memory from under it. The
  // daemon refuses a pool without F_SEAL_SHRINK.
  if (::fcntl(fd.get(), F_ADD_SEALS,
              F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return absl::InternalError(
        absl::StrCat("sealing the shared-memory pool: ", strerror(errno)));
  }
  void* base =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping the shared-memory pool of ", bytes,
                     " bytes: ", strerror(errno)));
  }
  return std::unique_ptr<SharedPool>(
      new SharedPool(std::move(fd), static_cast<std::byte*>(base), bytes));
}

SharedPool::~SharedPool() { ::munmap(base_, size_); }

absl::StatusOr<absl::Span<float>> SharedPool::AllocateFloats(size_t elements) {
  const size_t bytes = elements * sizeof(float);
  absl::MutexLock lock(&mu_);
  const size_t begin = (used_ + 63) / 64 * 64;
  if (begin > size_ || size_ - begin < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("shared-memory pool full: ", bytes, " bytes asked, ",
                     size_ - std::min(begin, size_), " of ", size_,
                     " bytes left (raise ClientOptions::pool_bytes)"));
  }
  used_ = begin + bytes;
  float* data = reinterpret_cast<float*>(base_ + begin);
  std::memset(data, 0, bytes);
  return absl::Span<float>(data, elements);
}

std::optional<uint64_t> SharedPool::OffsetOf(const void* data,
                                             size_t bytes) const {
  const std::byte* p = static_cast<const std::byte*>(data);
  if (p < base_ || p > base_ + size_) return std::nullopt;
  const size_t offset = static_cast<size_t>(p - base_);
  if (size_ - offset < bytes) return std::nullopt;
  return offset;
}

}  // namespace client
}  // namespace starling
