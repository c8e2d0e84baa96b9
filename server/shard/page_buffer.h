// PageBuffer: a zero-filled, page-aligned block of anonymous memory (mmap),
// its length rounded up to whole pages, so that a transport can register it
// (RDMA memory regions and shared-memory mappings want page granularity).
// Move-only; thread-compatible.
#ifndef STARLING_SERVER_SHARD_PAGE_BUFFER_H_
#define STARLING_SERVER_SHARD_PAGE_BUFFER_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace starling {
namespace shard {

class PageBuffer {
 public:
  // Maps at least `bytes` bytes, zero-filled. Zero bytes maps nothing
  // (data() == nullptr). ResourceExhausted if the kernel refuses the mapping,
  // InvalidArgument if rounding `bytes` up to a page overflows.
  static absl::StatusOr<PageBuffer> Allocate(size_t bytes);

  // The system page size (sysconf(_SC_PAGESIZE)).
  static size_t PageBytes();

  PageBuffer() = default;
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer();

  // Page-aligned; nullptr when nothing is mapped.
  void* data() const { return data_; }
  // The bytes asked for.
  size_t size_bytes() const { return size_bytes_; }
  // The bytes mapped: size_bytes() rounded up to whole pages.
  size_t mapped_bytes() const { return mapped_bytes_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_PAGE_BUFFER_H_
