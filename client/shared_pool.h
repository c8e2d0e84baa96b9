// SharedPool: the client's shared-memory pool, a memfd mapped read-write
// here and, once its descriptor is passed at Hello, in the daemon. Buffers
// are carved by a bump allocator (64-byte aligned) and live as long as the
// pool. Thread-safe.
#ifndef STARLING_CLIENT_SHARED_POOL_H_
#define STARLING_CLIENT_SHARED_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace client {

class SharedPool {
 public:
  // Creates and maps a memfd of `bytes`. ResourceExhausted / Internal with
  // the system's reason.
  static absl::StatusOr<std::unique_ptr<SharedPool>> Create(size_t bytes);
  ~SharedPool();
  SharedPool(const SharedPool&) = delete;
  SharedPool& operator=(const SharedPool&) = delete;

  // The memfd (owned by the pool), to pass to the daemon.
  int fd() const { return fd_.get(); }
  size_t size_bytes() const { return size_; }

  // A zeroed buffer of `elements` floats. ResourceExhausted when full.
  absl::StatusOr<absl::Span<float>> AllocateFloats(size_t elements);

  // The offset of [data, data + bytes) in the pool, or nullopt when the
  // range is not entirely inside it.
  std::optional<uint64_t> OffsetOf(const void* data, size_t bytes) const;

 private:
  SharedPool(ScopedFd fd, std::byte* base, size_t size)
      : fd_(std::move(fd)), base_(base), size_(size) {}

  const ScopedFd fd_;
  std::byte* const base_;
  const size_t size_;
  absl::Mutex mu_;
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace client
}  // namespace starling

#endif  // STARLING_CLIENT_SHARED_POOL_H_
