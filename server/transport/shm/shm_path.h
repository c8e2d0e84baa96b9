// ShmPath: the writes between daemons of one host through shared memory,
// under a stream transport (TCP) that keeps everything else for those peers:
// the authenticated connection, control messages, goodbyes and liveness (a
// peer that dies is seen there and fails the path's writes to it).
//
// Layout: each rank creates one POSIX shared-memory segment (shm_segment.h),
// "/starling-shm-<pid>-<random>", with a ring per peer that writes to it
// over this path; the name travels in the HELLO over the authenticated
// connection (fabric_connect.h). A writer copies the WRITE frame
// (frame_format.md) into its ring in the reader's segment on its own thread
// (the rest, when the ring is full, from its path's thread); the reader's
// path thread copies the payload straight into the registered region, as
// the TCP transport's reader does from its socket. A payload of 32 KiB or
// more moves with one copy instead of two: the ring carries a reference and
// the reader copies the bytes from the writer's memory straight into the
// region (process_vm_readv; shm_link.h), where the reader may read the
// writer's memory (same user; a probe in the HELLO tells), and the write
// completes once the reader has them.
//
// The segment is created once the HELLOs said which peers share this host
// (Establish()), with memory reserved for their rings only, and its name is
// removed as soon as they have all mapped it: nothing stays in /dev/shm even
// if the process is killed later. /dev/shm is private to the user (mode
// 0600); the random name is handed only to the group's members.
//
// Thread-safe. Threads: one, from Attach() to Stop().
#ifndef STARLING_SERVER_TRANSPORT_SHM_SHM_PATH_H_
#define STARLING_SERVER_TRANSPORT_SHM_SHM_PATH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/transport/fabric/peer_path.h"
#include "server/transport/handshake.h"
#include "server/transport/shm/shm_link.h"
#include "server/transport/shm/shm_segment.h"

namespace starling {
namespace transport {
namespace shm {

struct ShmPathOptions {
  // Bytes of each ring (one per ordered pair of daemons on this host);
  // 64 KiB to 1 GiB.
  uint64_t ring_bytes = uint64_t{4} << 20;
  // Let peers read large writes from this process's memory (one copy)
  // where they can; false: every byte through the rings (two copies).
  bool single_copy = true;
};

class ShmPath : public fabric::PeerPath {
 public:
  // Chooses this rank's segment name; nothing is created before
  // Establish(). InvalidArgument for a ring size out of range.
  static absl::StatusOr<std::unique_ptr<ShmPath>> Open(
      const ShmPathOptions& options, int rank, int size, RankNamer name);

  ShmPath(const ShmPath&) = delete;
  ShmPath& operator=(const ShmPath&) = delete;
  ~ShmPath() override;

  // The segment's name and the ring size (provider "shm").
  fabric::FabricHello HelloFor(int peer) const override;
  // FailedPrecondition for a HELLO that is not a Starling shared-memory
  // one (another provider, a name that is not a segment's).
  absl::Status Connect(int peer, const fabric::FabricHello& hello) override;
  // Creates this rank's segment (reserving the connected peers' rings) and
  // maps each connected peer's, waiting for it until `deadline`
  // (DeadlineExceeded naming the peer and the segment).
  absl::Status Establish(absl::Time deadline) override;
  uint64_t registrations() const override { return 0; }
  std::string name() const override { return "shm"; }

  void Attach(Sink sink) override;
  void PostWrite(int peer, absl::Span<const std::byte> data, RegionId remote,
                 uint64_t remote_offset_bytes, uint32_t imm,
                 Completion* done) override;
  void FailPeer(int peer, const absl::Status& why) override;
  void Wake() override;
  void Drain(absl::Time deadline) override;
  void Stop() override;

  // "/starling-shm-4711-0123456789abcdef".
  const std::string& segment_name() const { return segment_name_; }
  // Peers whose large writes this rank reads from their memory directly
  // (set by Establish()).
  int single_copy_peers() const { return single_copy_peers_; }

 private:
  ShmPath(const ShmPathOptions& options, int rank, int size, RankNamer name,
          std::string segment_name);
  void Loop();
  bool Poll();
  // Removes the segment's name once every connected peer mapped it.
  void UnlinkWhenMapped();

  const ShmPathOptions options_;
  const int rank_;
  const int size_;
  // Names ranks while the group forms; its transport may be going by the
  // time Stop() runs, which uses own_name_.
  const RankNamer name_;
  const std::string own_name_;
  const std::string segment_name_;
  // Set before Attach() (Connect(), Establish()), fixed after.
  std::vector<std::string> peer_segments_;  // by peer; "" if not connected
  // Where each connected peer's probe is, and what it holds (its HELLO).
  std::vector<std::pair<uint64_t, uint64_t>> peer_probes_;
  int single_copy_peers_ = 0;
  // Read by peers with process_vm_readv to learn whether they can.
  uint64_t probe_ = 0;
  std::unique_ptr<ShmSegment> own_;
  std::vector<std::unique_ptr<RingLink>> links_;  // by peer; null if unused
  Sink sink_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};      // relaxed; the doorbell orders it
  std::atomic<bool> wake_pending_{false};  // registration changes
  bool unlinked_ = false;                  // the path's thread only
};

}  // namespace shm
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_SHM_SHM_PATH_H_
