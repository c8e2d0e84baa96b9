// The shared-memory layout of the shm transport. Each rank owns one POSIX
// shared-memory segment, "/starling-<job_id>-r<rank>", holding a header
// (identity, pid, doorbell) and one byte ring per other rank: ring s carries
// frames (frame_format.md) from rank s to the owner. A sender copies into
// the ring and rings the owner's doorbell, a futex word; the owner copies
// out (straight into the registered region) and rings the sender's doorbell
// when the sender said it waits for room.
//
// ShmSegment (a mapping) is thread-compatible; ShmRing is single-producer
// (under the sender's lock) single-consumer (the owner's I/O thread), which
// its atomics make safe across processes.
#ifndef STARLING_SERVER_TRANSPORT_SHM_SHM_SEGMENT_H_
#define STARLING_SERVER_TRANSPORT_SHM_SHM_SEGMENT_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace starling {
namespace transport {
namespace shm {

inline constexpr uint64_t kSegmentMagic = 0x4D48534C54530002ull;
inline constexpr uint32_t kMaxRanks = 256;

// Futex-backed wake-up word in shared memory.
struct Doorbell {
  std::atomic<uint32_t> count{0};     // bumped on every ring
  std::atomic<uint32_t> sleeping{0};  // the owner may be in FutexWait
};

struct SegmentHeader {
  uint64_t magic;
  uint32_t version;  // frame protocol version of the owner
  uint32_t group_size;
  uint32_t rank;
  int32_t pid;
  uint64_t ring_bytes;
  std::atomic<uint32_t> ready;  // release-stored 1 once initialised
  Doorbell doorbell;
  std::atomic<uint8_t> mapped_by[kMaxRanks];  // peers that mapped us
};

struct alignas(64) RingControl {
  std::atomic<uint64_t> head{0};  // bytes ever written (by the sender)
  char pad0[56];
  std::atomic<uint64_t> tail{0};  // bytes ever read (by the owner)
  char pad1[56];
  std::atomic<uint32_t> closed{0};          // the sender will write no more
  std::atomic<uint32_t> sender_waiting{0};  // the sender waits for room
  // Single-copy rings (shm_link.h): the reader sets `reads_sender` once it
  // has read the sender's memory directly (process_vm_readv), and counts
  // the references it has copied in `refs_done`.
  std::atomic<uint32_t> reads_sender{0};
  std::atomic<uint64_t> refs_done{0};
};

// Blocks until `bell` changes from `seen` or `timeout` passes.
void DoorbellWait(Doorbell* bell, uint32_t seen, absl::Duration timeout);
// Bumps `bell` and wakes its owner if it may be asleep.
void DoorbellRing(Doorbell* bell);

// One mapped segment.
class ShmSegment {
 public:
  // Removes a leftover of a previous run, then creates and initialises the
  // segment for `rank`. The rings of the senders in `reserve` get their
  // memory now (posix_fallocate), so that a full /dev/shm is an error here
  // (ResourceExhausted naming the size) rather than a SIGBUS at a write;
  // the others get pages as they are touched. Unavailable /
  // ResourceExhausted on failure.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(
      const std::string& name, uint32_t version, uint32_t group_size,
      uint32_t rank, uint64_t ring_bytes, const std::vector<int>& reserve = {});
  // Maps an existing, initialised segment. NotFound if absent or not yet
  // ready (retry), FailedPrecondition if it is not a Starling segment.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(
      const std::string& name);

  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // Removes the name (the mapping stays valid). Idempotent.
  void Unlink();

  SegmentHeader* header() const { return header_; }
  RingControl* ring(int sender) const;
  char* ring_data(int sender) const;
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, void* base, size_t bytes, bool owner);
  static size_t SegmentBytes(uint32_t group_size, uint64_t ring_bytes);

  const std::string name_;
  void* const base_;
  const size_t bytes_;
  bool owner_;
  SegmentHeader* header_;
};

// Copies between iovecs and a ring; return bytes moved.
size_t RingWrite(RingControl* ring, char* data, uint64_t capacity,
                 const struct iovec* iov, int count);
size_t RingRead(RingControl* ring, const char* data, uint64_t capacity,
                const struct iovec* iov, int count);

// True if process `pid` is gone (or a zombie).
bool ProcessIsDead(pid_t pid);

}  // namespace shm
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_SHM_SHM_SEGMENT_H_
