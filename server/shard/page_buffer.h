// PageBuffer: a zero-filled, page-aligned block of anonymous memory (mmap),
// its length rounded up to whole pages, so that a transport can register it
// (RDMA memory regions and shared-memory mappings want page granularity).
// A shared one (AllocateShared) lives in a sealed memfd behind a one-page
// header (server/base/shared_parameters.h), so that other processes can map
// it read-only. Move-only; thread-compatible.
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

  // Like Allocate, but the memory is a memfd named `name` laid out as
  // server/base/shared_parameters.h says: a header page (mapped here too,
  // header(); its fields start as version 0, not writing), then the buffer's
  // pages (data()). The memfd is sealed against shrinking and growing and,
  // where the kernel has F_SEAL_FUTURE_WRITE (Linux >= 5.1), against any
  // new writable mapping or write(): whoever gets fd() can map it read-only
  // only; this process's own mappings stay writable. Zero bytes still maps
  // the header (data() == nullptr). ResourceExhausted if the kernel refuses
  // the memfd or the mapping.
  static absl::StatusOr<PageBuffer> AllocateShared(size_t bytes,
                                                   const char* name);

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
  // The shared buffer's memfd (owned; dup it to pass it on), or -1.
  int fd() const { return fd_; }
  // The shared buffer's header page (SharedParametersHeader), or nullptr.
  void* header() const { return header_; }
  // The bytes asked for.
  size_t size_bytes() const { return size_bytes_; }
  // The bytes mapped: size_bytes() rounded up to whole pages.
  size_t mapped_bytes() const { return mapped_bytes_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  int fd_ = -1;
  void* header_ = nullptr;
};

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_PAGE_BUFFER_H_
