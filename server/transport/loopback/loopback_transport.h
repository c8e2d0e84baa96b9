// LoopbackTransport: an in-process fake of the Transport interface for tests.
//
// A LoopbackFabric owns N endpoints, one per rank, all in one process. A
// Write() copies the bytes straight into the peer's registered region (or,
// before the peer has registered it, into a held copy applied at
// registration, or dropped and counted if the region was retired, as the
// stream transports do) and completes at once; control messages are queued per
// (sender, tag). KillRankForTesting() makes a rank vanish: every peer's
// waits on it fail with Unavailable naming "rank R (loopback)", and the
// killed rank's own operations fail too. AbortPeer() closes the pair in both
// directions, as a real connection would.
//
//   LoopbackFabric fabric(4);
//   transport::Transport* t0 = fabric.endpoint(0);  // one per rank thread
//
// Thread-safe: every method may be called from any thread.
#ifndef STARLING_SERVER_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"
#include "server/transport/retired_regions.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace loopback {

class LoopbackFabric;

// One rank's endpoint. Created only by LoopbackFabric, which owns it.
class LoopbackTransport : public Transport {
 public:
  LoopbackTransport(const LoopbackTransport&) = delete;
  LoopbackTransport& operator=(const LoopbackTransport&) = delete;
  ~LoopbackTransport() override = default;

  int rank() const override { return rank_; }
  int size() const override;
  std::string PeerName(int rank) const override;

  absl::Status RegisterRegion(RegionId id,
                              absl::Span<std::byte> memory) override;
  absl::Status DeregisterRegion(RegionId id) override;
  void RetireRegions(RegionId first, RegionId end) override;
  uint64_t stale_writes_dropped() const override;
  void Write(int peer, absl::Span<const std::byte> data, RegionId remote,
             uint64_t remote_offset_bytes, uint32_t imm,
             Completion* done) override;
  absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                           absl::Time deadline) override;
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override;
  absl::StatusOr<std::vector<std::byte>> RecvControl(
      int peer, uint32_t tag, absl::Time deadline) override;
  absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag) override;
  size_t max_control_bytes() const override;
  absl::Status PeerStatus(int peer) const override;
  void AbortPeer(int peer, const absl::Status& why) override;

 private:
  friend class LoopbackFabric;

  // A write that arrived before its region was registered.
  struct HeldWrite {
    int peer;
    uint64_t offset_bytes;
    uint32_t imm;
    std::vector<std::byte> bytes;
  };

  LoopbackTransport(LoopbackFabric* fabric, int rank, int size);

  // Pops the next control message from `peer` with `tag`; nullopt if none
  // is queued; the peer's sticky error if it is lost.
  absl::StatusOr<std::optional<std::vector<std::byte>>> TakeControlLocked(
      int peer, uint32_t tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Lands a write from `from` (called on the sender's thread).
  absl::Status Deliver(int from, absl::Span<const std::byte> data,
                       RegionId region, uint64_t offset_bytes, uint32_t imm);
  absl::Status DeliverControl(int from, uint32_t tag,
                              absl::Span<const std::byte> message);
  // Marks `peer` lost with `why` unless it already is.
  void MarkLost(int peer, const absl::Status& why);
  absl::Status CheckPeer(int peer) const;

  LoopbackFabric* const fabric_;  // owns this endpoint
  const int rank_;

  mutable absl::Mutex mu_;
  std::vector<absl::Status> peer_status_ ABSL_GUARDED_BY(mu_);
  std::map<RegionId, absl::Span<std::byte>> regions_ ABSL_GUARDED_BY(mu_);
  std::map<RegionId, std::deque<WriteNotice>> notices_ ABSL_GUARDED_BY(mu_);
  std::map<RegionId, std::vector<HeldWrite>> held_ ABSL_GUARDED_BY(mu_);
  size_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  RetiredRegions retired_ ABSL_GUARDED_BY(mu_);
  uint64_t stale_writes_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, uint32_t>, std::deque<std::vector<std::byte>>>
      control_ ABSL_GUARDED_BY(mu_);
};

// Owns the N endpoints of one in-process group. Thread-safe.
class LoopbackFabric {
 public:
  struct Options {
    // Bytes of early writes held per endpoint before registration; beyond
    // it a write fails with ResourceExhausted.
    size_t max_held_bytes = size_t{1} << 30;
    // Largest control message.
    size_t max_control_bytes = 64 * 1024;
  };

  // REQUIRES: size >= 1.
  explicit LoopbackFabric(int size) : LoopbackFabric(size, Options()) {}
  LoopbackFabric(int size, const Options& options);
  LoopbackFabric(const LoopbackFabric&) = delete;
  LoopbackFabric& operator=(const LoopbackFabric&) = delete;

  int size() const { return static_cast<int>(endpoints_.size()); }
  const Options& options() const { return options_; }

  // Rank `rank`'s endpoint, owned by the fabric. REQUIRES: 0 <= rank < size.
  LoopbackTransport* endpoint(int rank) { return endpoints_[rank].get(); }

  // Makes `rank` vanish as a crashed process would: every peer sees it lost
  // (Unavailable, "rank R (loopback) was killed"), and its own endpoint sees
  // every peer lost.
  void KillRankForTesting(int rank);

 private:
  Options options_;
  std::vector<std::unique_ptr<LoopbackTransport>> endpoints_;
};

}  // namespace loopback
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_LOOPBACK_LOOPBACK_TRANSPORT_H_
