// ShmTransport: the Transport (transport.h) between ranks on one host,
// through POSIX shared memory (shm_segment.h). Frames follow
// frame_format.md, so the sending and receiving halves are the TCP
// transport's (FrameSender, FrameReceiver, Inbox); only the byte stream
// differs: a ring per ordered pair of ranks, with futex doorbells.
//
// Data path: Write() copies header and payload into the peer's ring on the
// caller's thread (the rest, when the ring is full, from the I/O thread),
// and completes once the whole frame is in the ring; the owner's I/O thread
// copies payloads straight into registered regions. A rejected write comes
// back as an ERROR frame and becomes the writer's sticky status for that
// peer.
// The I/O thread spins briefly when idle, then sleeps on its doorbell.
//
// Names: "/starling-<job_id>-r<rank>". Create() removes a stale segment of
// the same name, and unlinks its own as soon as every peer has mapped it, so
// nothing is left behind even if the process is killed later.
//
// Peer death: the I/O thread checks peers' pids every liveness_interval (a
// vanished or zombie process is Unavailable "rank 2 (shm pid 4711) died"),
// so waits end well within their deadline.
//
// Thread-safe. Threads: one I/O thread.
#ifndef STARLING_SERVER_TRANSPORT_SHM_SHM_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_SHM_SHM_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/transport/frame.h"
#include "server/transport/inbox_transport.h"
#include "server/transport/shm/shm_link.h"
#include "server/transport/shm/shm_segment.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace shm {

struct ShmOptions {
  // Names the job's segments; ranks of one group share it, concurrent jobs
  // (and test runs) must not. Letters, digits, '-' and '_'.
  std::string job_id;
  int rank = -1;
  int size = 0;
  // Bytes of each ring (one per ordered pair of ranks).
  uint64_t ring_bytes = uint64_t{4} << 20;
  // How long Create() waits for the other ranks' segments.
  absl::Duration connect_timeout = absl::Seconds(30);
  // How often the I/O thread checks that peers are alive.
  absl::Duration liveness_interval = absl::Milliseconds(100);
  size_t max_early_bytes = size_t{64} << 20;
  size_t max_control_bytes = size_t{1} << 20;
  absl::Duration shutdown_timeout = absl::Seconds(2);
  uint8_t protocol_version_for_testing = kProtocolVersion;
};

class ShmTransport : public InboxTransport {
 public:
  // Creates this rank's segment, maps every peer's (waiting up to
  // connect_timeout: DeadlineExceeded naming the ranks missing), checks
  // protocol version and group size (FailedPrecondition naming both), and
  // starts the I/O thread.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(
      const ShmOptions& options);

  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;
  ~ShmTransport() override;

  // The rest of Transport is InboxTransport's.
  std::string PeerName(int rank) const override;

  // The segment name of `rank` for `job_id`.
  static std::string SegmentName(const std::string& job_id, int rank);

 private:
  explicit ShmTransport(const ShmOptions& options);
  absl::Status Start();
  void Loop();
  bool Poll();
  void CheckLiveness();
  // Writes travel in one part.
  void PostWrite(int peer, absl::Span<const std::byte> data, RegionId remote,
                 uint64_t remote_offset_bytes, uint32_t imm,
                 Completion* done) override;
  absl::Status PostControl(int peer, const FrameHeader& header,
                           std::vector<std::byte> message) override;
  // Both frames through the peer's ring in one post.
  absl::Status PostControlThenWrite(int peer, const FrameHeader& control,
                                    std::vector<std::byte> message,
                                    absl::Span<const std::byte> data,
                                    RegionId remote,
                                    uint64_t remote_offset_bytes, uint32_t imm,
                                    Completion* done) override;
  void FailPeer(int peer, const absl::Status& why, bool send_error,
                bool orderly) override;
  void Wake();
  void MarkEof();

  const ShmOptions options_;
  std::vector<std::unique_ptr<RingLink>>
      links_;  // by peer; fixed after Start()
  std::unique_ptr<ShmSegment> own_;
  std::thread io_;
  std::atomic<bool> stopping_{false};      // relaxed; the doorbell orders it
  std::atomic<bool> wake_pending_{false};  // registration changes

  absl::Mutex eof_mu_;
  absl::CondVar eof_cv_;
  int open_links_ ABSL_GUARDED_BY(eof_mu_) = 0;
};

}  // namespace shm
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_SHM_SHM_TRANSPORT_H_
