#include "server/transport/shm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace starling {
namespace transport {
namespace shm {
namespace {

constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "header too large");

absl::Status Errno(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == ENOMEM || err == ENOSPC || err == EMFILE) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::UnavailableError(message);
}

}  // namespace

void DoorbellWait(Doorbell* bell, uint32_t seen, absl::Duration timeout) {
  struct timespec ts = absl::ToTimespec(timeout);
  // Shared (not FUTEX_PRIVATE): the waker may be another process.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->count), FUTEX_WAIT,
          seen, &ts, nullptr, 0);
}

void DoorbellRing(Doorbell* bell) {
  // Seq_cst pairs with the owner's sleeping flag / re-check protocol.
  bell->count.fetch_add(1, std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->count), FUTEX_WAKE, 1,
            nullptr, nullptr, 0);
  }
}

size_t ShmSegment::SegmentBytes(uint32_t group_size, uint64_t ring_bytes) {
  return kHeaderBytes + group_size * (sizeof(RingControl) + ring_bytes);
}

ShmSegment::ShmSegment(std::string name, void* base, size_t bytes, bool owner)
    : name_(std::move(name)),
      base_(base),
      bytes_(bytes),
      owner_(owner),
      header_(static_cast<SegmentHeader*>(base)) {}

ShmSegment::~ShmSegment() {
  if (owner_) Unlink();
  munmap(base_, bytes_);
}

void ShmSegment::Unlink() {
  if (!owner_) return;
  shm_unlink(name_.c_str());  // ENOENT after an earlier unlink is fine
  owner_ = false;
}

RingControl* ShmSegment::ring(int sender) const {
  char* p = static_cast<char*>(base_) + kHeaderBytes +
            sender * (sizeof(RingControl) + header_->ring_bytes);
  return reinterpret_cast<RingControl*>(p);
}

char* ShmSegment::ring_data(int sender) const {
  return reinterpret_cast<char*>(ring(sender)) + sizeof(RingControl);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(
    const std::string& name, uint32_t version, uint32_t group_size,
    uint32_t rank, uint64_t ring_bytes, const std::vector<int>& reserve) {
  shm_unlink(name.c_str());  // a stale segment of an earlier run
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(errno, absl::StrCat("shm_open ", name));
  const size_t bytes = SegmentBytes(group_size, ring_bytes);
  if (ftruncate(fd, bytes) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Errno(err, absl::StrCat("ftruncate ", name, " to ", bytes));
  }
  const uint64_t ring_span = sizeof(RingControl) + ring_bytes;
  for (int sender : reserve) {
    const int failed =
        posix_fallocate(fd, kHeaderBytes + sender * ring_span, ring_span);
    if (failed != 0) {
      close(fd);
      shm_unlink(name.c_str());
      return absl::ResourceExhaustedError(absl::StrCat(
          "shared memory: no room in /dev/shm for ", name, "'s ring from rank ",
          sender, " (", ring_span >> 10, " KiB of ", reserve.size(),
          " such rings): ", std::strerror(failed)));
    }
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Errno(err, absl::StrCat("mmap ", name));
  }
  // The fresh mapping is zero-filled: atomics start at 0.
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(name, base, bytes, /*owner=*/true));
  SegmentHeader* h = segment->header_;
  h->magic = kSegmentMagic;
  h->version = version;
  h->group_size = group_size;
  h->rank = rank;
  h->pid = getpid();
  h->ring_bytes = ring_bytes;
  for (uint32_t s = 0; s < group_size; ++s) new (segment->ring(s)) RingControl;
  // Release: a peer that sees ready == 1 sees the initialised header.
  h->ready.store(1, std::memory_order_release);
  return segment;
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(
    const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(errno, absl::StrCat("shm_open ", name));
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kHeaderBytes)) {
    close(fd);
    return absl::NotFoundError(absl::StrCat(name, " is not ready"));
  }
  void* base =
      mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return Errno(err, absl::StrCat("mmap ", name));
  std::unique_ptr<ShmSegment> segment(
      new ShmSegment(name, base, st.st_size, /*owner=*/false));
  SegmentHeader* h = segment->header_;
  if (h->ready.load(std::memory_order_acquire) != 1) {
    return absl::NotFoundError(absl::StrCat(name, " is not ready"));
  }
  if (h->magic != kSegmentMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is not a Starling segment"));
  }
  if (SegmentBytes(h->group_size, h->ring_bytes) !=
      static_cast<size_t>(st.st_size)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " has an inconsistent size"));
  }
  return segment;
}

size_t RingWrite(RingControl* ring, char* data, uint64_t capacity,
                 const struct iovec* iov, int count) {
  const uint64_t head = ring->head.load(std::memory_order_relaxed);
  // Acquire: the reader finished with the bytes before it moved tail.
  const uint64_t tail = ring->tail.load(std::memory_order_acquire);
  uint64_t room = capacity - (head - tail);
  uint64_t pos = head;
  for (int i = 0; i < count && room > 0; ++i) {
    const char* src = static_cast<const char*>(iov[i].iov_base);
    size_t n = std::min<uint64_t>(iov[i].iov_len, room);
    room -= n;
    while (n > 0) {
      const uint64_t at = pos % capacity;
      const size_t chunk = std::min<uint64_t>(n, capacity - at);
      std::memcpy(data + at, src, chunk);
      src += chunk;
      pos += chunk;
      n -= chunk;
    }
  }
  // Release: the bytes are visible before the new head.
  ring->head.store(pos, std::memory_order_release);
  return pos - head;
}

size_t RingRead(RingControl* ring, const char* data, uint64_t capacity,
                const struct iovec* iov, int count) {
  const uint64_t tail = ring->tail.load(std::memory_order_relaxed);
  const uint64_t head = ring->head.load(std::memory_order_acquire);
  uint64_t available = head - tail;
  uint64_t pos = tail;
  for (int i = 0; i < count && available > 0; ++i) {
    char* dst = static_cast<char*>(iov[i].iov_base);
    size_t n = std::min<uint64_t>(iov[i].iov_len, available);
    available -= n;
    while (n > 0) {
      const uint64_t at = pos % capacity;
      const size_t chunk = std::min<uint64_t>(n, capacity - at);
      std::memcpy(dst, data + at, chunk);
      dst += chunk;
      pos += chunk;
      n -= chunk;
    }
  }
  ring->tail.store(pos, std::memory_order_release);
  return pos - tail;
}

bool ProcessIsDead(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  // A killed child of ours stays a zombie until reaped: dead all the same.
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* file = std::fopen(path, "r");
  if (file == nullptr) return false;
  char state = '?';
  // Format: "pid (comm) state ..."; comm may hold spaces, so find ')'.
  char line[512];
  if (std::fgets(line, sizeof(line), file) != nullptr) {
    const char* close_paren = std::strrchr(line, ')');
    if (close_paren != nullptr && close_paren[1] == ' ') state = close_paren[2];
  }
  std::fclose(file);
  return state == 'Z' || state == 'X';
}

}  // namespace shm
}  // namespace transport
}  // namespace starling
