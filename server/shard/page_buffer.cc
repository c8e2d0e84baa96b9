#include "server/shard/page_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/logging.h"
#include "server/base/shared_parameters.h"

namespace starling {
namespace shard {

size_t PageBuffer::PageBytes() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

absl::StatusOr<PageBuffer> PageBuffer::Allocate(size_t bytes) {
  PageBuffer buffer;
  if (bytes == 0) return buffer;
  const size_t page = PageBytes();
  if (bytes > SIZE_MAX - (page - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer of ", bytes, " bytes overflows when rounded up to ", page,
        "-byte pages"));
  }
  const size_t mapped = (bytes + page - 1) / page * page;
  // Anonymous private mappings are page-aligned and zero-filled; pages are
  // only backed when first touched.
  void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "mmap of ", mapped, " bytes failed: ", std::strerror(error)));
  }
  buffer.data_ = data;
  buffer.size_bytes_ = bytes;
  buffer.mapped_bytes_ = mapped;
  return buffer;
}

absl::StatusOr<PageBuffer> PageBuffer::AllocateShared(size_t bytes,
                                                      const char* name) {
  const size_t page = SharedParametersHeaderBytes();
  if (bytes > SIZE_MAX / 2 - page) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared buffer of ", bytes, " bytes overflows when rounded up to ",
        page, "-byte pages"));
  }
  const size_t file_bytes = SharedParametersFileBytes(bytes);
  PageBuffer buffer;
  buffer.fd_ = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (buffer.fd_ < 0) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "memfd_create of '", name, "' failed: ", std::strerror(error)));
  }
  if (ftruncate(buffer.fd_, static_cast<off_t>(file_bytes)) != 0) {
    const int error = errno;
    return absl::ResourceExhaustedError(
        absl::StrCat("sizing the memfd '", name, "' to ", file_bytes,
                     " bytes failed: ", std::strerror(error)));
  }
  void* header =
      mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, buffer.fd_, 0);
  if (header == MAP_FAILED) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "mmap of the header of '", name, "' failed: ", std::strerror(error)));
  }
  buffer.header_ = header;
  auto* h = new (header) SharedParametersHeader;
  h->version.store(0, std::memory_order_relaxed);
  h->writing.store(-1, std::memory_order_relaxed);
  if (bytes > 0) {
    const size_t mapped = file_bytes - page;
    void* data = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED,
                      buffer.fd_, static_cast<off_t>(page));
    if (data == MAP_FAILED) {
      const int error = errno;
      return absl::ResourceExhaustedError(
          absl::StrCat("mmap of ", mapped, " bytes of '", name,
                       "' failed: ", std::strerror(error)));
    }
    buffer.data_ = data;
    buffer.size_bytes_ = bytes;
    buffer.mapped_bytes_ = mapped;
  }
  int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
#ifdef F_SEAL_FUTURE_WRITE
  // After our own writable mappings: those stay writable, no new one can
  // be made (nor write(2)), by us or by a process the descriptor goes to.
  seals |= F_SEAL_FUTURE_WRITE;
#endif
  if (fcntl(buffer.fd_, F_ADD_SEALS, seals) != 0) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        "sealing the memfd '", name, "' failed: ", std::strerror(error)));
  }
  return buffer;
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      header_(std::exchange(other.header_, nullptr)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    fd_ = std::exchange(other.fd_, -1);
    header_ = std::exchange(other.header_, nullptr);
  }
  return *this;
}

PageBuffer::~PageBuffer() { Release(); }

void PageBuffer::Release() {
  if (header_ != nullptr) {
    const int rc = munmap(header_, SharedParametersHeaderBytes());
    STARLING_CHECK(rc == 0)
        << "munmap of a shared header failed: " << std::strerror(errno);
    header_ = nullptr;
  }
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (data_ == nullptr) return;
  // munmap of a range we mapped fails only on our own bug.
  const int rc = munmap(data_, mapped_bytes_);
  STARLING_CHECK(rc == 0) << "munmap of " << mapped_bytes_
                          << " bytes failed: " << std::strerror(errno);
  data_ = nullptr;
  size_bytes_ = 0;
  mapped_bytes_ = 0;
}

}  // namespace shard
}  // namespace starling
