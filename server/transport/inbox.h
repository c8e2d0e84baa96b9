// Inbox: the receiving half of a stream transport (tcp/, shm/), independent
// of how bytes travel. It owns the region registrations, writes that arrived
// before their region (bounded), write notices in post order, control
// message queues and each peer's sticky status, and implements the waiting
// Transport calls on them. The transport's I/O thread feeds it frame by frame.
//
// Thread-safe. Callbacks given in Options run on the calling thread with no
// lock held.
#ifndef STARLING_SERVER_TRANSPORT_INBOX_H_
#define STARLING_SERVER_TRANSPORT_INBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"
#include "server/transport/retired_regions.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

class Inbox {
 public:
  struct Options {
    int rank = 0;
    int size = 1;
    // Bound on bytes held for regions not registered yet; a write that does
    // not fit waits (BeginWrite says so) until a registration or a
    // retirement frees room.
    size_t max_early_bytes = 0;
    RankNamer name;
    // The inbox found a peer's data invalid outside the I/O path (an early
    // write past the end of the region registered for it): the transport
    // fails the peer's connection with `why` (already the sticky status).
    std::function<void(int peer, const absl::Status& why)> on_peer_error;
    // A registration (only while a write waits for room), deregistration
    // (only while its region is being written) or retirement happened: the
    // I/O thread must retry paused writes and re-check landings with
    // LandingValid().
    std::function<void()> wake_io;
    // WaitForWrite() with nothing to return spins this long (no lock held)
    // before it sleeps, sparing a small write the sleeping thread's wake-up.
    absl::Duration wait_spin = absl::ZeroDuration();
  };

  struct Region;
  struct EarlyPiece;

  // Where one WRITE frame's payload goes while it is received. Filled by
  // BeginWrite(), owned by the I/O thread, finished by EndWrite() or
  // AbandonWrite().
  struct Landing {
    FrameHeader header;
    std::byte* dst = nullptr;  // nullptr: discard the payload
    Region* region = nullptr;  // pinned against deregistration while set
    EarlyPiece* piece = nullptr;
    bool discarded = false;
  };

  explicit Inbox(Options options);
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;
  ~Inbox();

  // Transport calls; see transport.h for contracts.
  absl::Status RegisterRegion(RegionId id, absl::Span<std::byte> memory);
  absl::Status DeregisterRegion(RegionId id);
  void RetireRegions(RegionId first, RegionId end);
  uint64_t stale_writes_dropped() const;
  absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                           absl::Time deadline);
  absl::StatusOr<std::vector<std::byte>> RecvControl(int peer, uint32_t tag,
                                                     absl::Time deadline);
  // RecvControl() without waiting: nullopt when no message is queued.
  absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag);
  absl::Status PeerStatus(int peer) const;

  // Makes `why` the peer's sticky status unless it has one; wakes waiters.
  // Returns true if this call set it.
  bool FailPeer(int peer, const absl::Status& why);

  // Every wait, now and later, returns FailedPrecondition.
  void Shutdown();

  // I/O side. Starts receiving WRITE frame `header` from `peer`. Ok: fill
  // `landing->dst` with header.length bytes (or skip them when dst is null:
  // e.g. the region was retired), then call EndWrite(). *must_wait: the
  // region is not registered and the early-arrival room is full; call again
  // after wake_io. DataLoss (the peer's new sticky status) if the range is
  // outside the registered region.
  absl::Status BeginWrite(int peer, const FrameHeader& header, Landing* landing,
                          bool* must_wait);

  // False once the landing's region is being deregistered: call
  // DivertLanding() and discard the rest of the payload. Lock-free.
  static bool LandingValid(const Landing& landing);
  void DivertLanding(Landing* landing);

  // The payload is complete: the write's notice is published once all its
  // parts and earlier writes from `peer` are in. DataLoss (the peer's new
  // sticky status) if an early piece turned out to lie past the end of a
  // region registered while it was received, or if the frame contradicts
  // the other parts of its write.
  absl::Status EndWrite(int peer, Landing* landing);

  // The connection died mid-payload: forget the landing.
  void AbandonWrite(Landing* landing);

  // Queues a control message from `peer`.
  void DeliverControl(int peer, uint32_t tag, std::vector<std::byte> message);

  // Bytes held for regions not registered yet.
  size_t early_bytes() const;

 private:
  struct PendingWrite {
    RegionId region = 0;
    uint32_t imm = 0;
    uint64_t begin = UINT64_MAX;
    uint64_t end = 0;
    int parts_seen = 0;
    int part_count = 0;
    bool discarded = false;
  };
  struct PeerState {
    absl::Status status;
    uint32_t next_seq = 0;  // the next write to publish
    absl::flat_hash_map<uint32_t, PendingWrite> pending;
  };

  // DataLoss if the part contradicts the write's other parts (region, imm,
  // part count), is one too many, or belongs to a write already complete.
  absl::Status NoteWritePart(int peer, const Landing& landing)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(int peer, const PendingWrite& write)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retired and not registered: its writes are dropped.
  bool Stale(RegionId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies a complete early piece into its region. Reads only the piece
  // and the region's memory (fixed at registration): no lock needed, and
  // RegisterRegion calls it with none held.
  absl::Status ApplyPiece(Region* region, EarlyPiece* piece) const;
  void DropPiece(RegionId region, EarlyPiece* piece)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unpin(Region* region) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RangeError(int peer, const Region& region, uint64_t offset,
                          uint64_t length) const;
  absl::Status WaitError(int peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InvalidArgument unless `peer` is another rank of the group.
  absl::Status CheckControlPeer(int peer) const;
  // Pops the next control message from `peer` with `tag`; nullopt if none
  // is queued; the peer's error (or shutdown) if it is lost.
  absl::StatusOr<std::optional<std::vector<std::byte>>> TakeControlLocked(
      int peer, uint32_t tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes waiters and bumps epoch_.
  void Changed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Spins with no lock held until epoch_ moves past `seen` (true) or `until`
  // passes (false).
  bool SpinForChange(uint64_t seen, absl::Time until) const;

  const Options options_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a notice, message, registration or failure
  // Counts changed_ signals, for spinning waiters. Written under mu_ with
  // release, read without it with acquire.
  std::atomic<uint64_t> epoch_{0};
  absl::flat_hash_map<RegionId, std::unique_ptr<Region>> regions_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RegionId, std::deque<WriteNotice>> notices_
      ABSL_GUARDED_BY(mu_);
  // Early arrivals and the notices of writes that consist of them, by region.
  absl::flat_hash_map<RegionId, std::vector<std::unique_ptr<EarlyPiece>>> early_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RegionId, std::vector<WriteNotice>> deferred_notices_
      ABSL_GUARDED_BY(mu_);
  size_t early_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // BeginWrite() told a write to wait since the last registration: the next
  // one wakes the I/O thread (the ops' own registrations need not).
  bool writes_waiting_ ABSL_GUARDED_BY(mu_) = false;
  RetiredRegions retired_ ABSL_GUARDED_BY(mu_);
  uint64_t stale_writes_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::deque<std::vector<std::byte>>> control_
      ABSL_GUARDED_BY(mu_);
  std::vector<PeerState> peers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

struct Inbox::Region {
  RegionId id = 0;
  absl::Span<std::byte> memory;
  // Landings writing into `memory`, and RegisterRegion while it applies
  // the early pieces; guarded by the inbox mu_.
  int pins = 0;
  // RegisterRegion is applying early pieces (no lock held): notices of
  // this region wait in deferred_notices_ until they are in. Guarded by
  // the inbox mu_.
  bool applying_early = false;
  // Set (release) when deregistration starts; read lock-free by the I/O
  // thread (acquire) before each read into `memory`.
  std::atomic<bool> leaving{false};
};

struct Inbox::EarlyPiece {
  int peer = -1;
  uint64_t offset = 0;
  std::vector<std::byte> data;
  bool complete = false;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_INBOX_H_
