#include "server/shard/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

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

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

PageBuffer::~PageBuffer() { Release(); }

void PageBuffer::Release() {
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
