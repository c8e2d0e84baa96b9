// TcpTransport: the Transport over TCP (transport.h), the default between
// machines. Create() listens, forms the all-to-all mesh with a versioned
// handshake (mesh.h) and starts one event-loop thread; frames follow
// frame_format.md.
//
// Data path. Write() runs on the caller's thread: it encodes a header and
// gathers header + payload into the socket with one sendmsg() (no copy of
// the payload, several queued frames per call); what the socket does not
// take, the event loop sends when it becomes writable. Writes of at least
// stripe_min_bytes are split across the peer's sockets_per_peer connections.
// The loop (epoll, level-triggered) reads payloads straight into registered
// regions, batches small frames through a staging buffer, and acknowledges
// writes; a write's Completion finishes on the ACK, so a write the receiver
// rejects fails on both sides. Socket buffers are left to the kernel's
// autotuning by default: on loopback, fixed sizes of 4-8 MiB measured no
// faster (options allow setting them).
//
// Failures. A peer's EOF or reset, a malformed frame, an out-of-range write
// or AbortPeer() fail that peer: its sticky status fails pending and later
// writes and wakes waits on it. The destructor says GOODBYE to each peer so
// that they see an orderly shutdown, waits (bounded) for them, then joins
// the loop.
//
// Thread-safe (every Transport method, from any thread). Threads: one event
// loop, named in logs by its thread id.
#ifndef STARLING_SERVER_TRANSPORT_TCP_TCP_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_TCP_TCP_TRANSPORT_H_

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
#include "server/transport/inbox.h"
#include "server/transport/tcp/tcp_options.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace tcp {

class TcpConnection;

class TcpTransport : public Transport {
 public:
  // Binds peers[rank] (Unavailable "address 127.0.0.1:7001 already in use
  // (rank 1)"), connects to every other rank and handshakes, then returns.
  // InvalidArgument for bad options; see FormMesh() for the rest.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(
      const TcpOptions& options);

  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;
  ~TcpTransport() override;

  int rank() const override { return options_.rank; }
  int size() const override { return static_cast<int>(options_.peers.size()); }
  std::string PeerName(int rank) const override;
  absl::Status RegisterRegion(RegionId id,
                              absl::Span<std::byte> memory) override;
  absl::Status DeregisterRegion(RegionId id) override;
  void Write(int peer, absl::Span<const std::byte> data, RegionId remote,
             uint64_t remote_offset_bytes, uint32_t imm,
             Completion* done) override;
  absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                           absl::Time deadline) override;
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override;
  absl::StatusOr<std::vector<std::byte>> RecvControl(
      int peer, uint32_t tag, absl::Time deadline) override;
  size_t max_control_bytes() const override {
    return options_.max_control_bytes;
  }
  absl::Status PeerStatus(int peer) const override;
  void AbortPeer(int peer, const absl::Status& why) override;

  // Bytes held for regions not registered yet (for tests and metrics).
  size_t early_bytes() const { return inbox_.early_bytes(); }

 private:
  struct Peer;

  explicit TcpTransport(const TcpOptions& options);

  absl::Status Start(int listen_fd);
  void Loop();
  void Wake();
  void HandleReadable(TcpConnection* connection, uint32_t events);
  void HandleWakeup();
  // Fails `peer` with `why` (unless it already failed) and every connection
  // to it; `error_connection` (or -1) tells the peer through an ERROR frame.
  void FailPeer(int peer, const absl::Status& why, int error_connection,
                bool orderly);
  void CloseConnection(TcpConnection* connection);
  bool ValidPeer(int peer) const;

  const TcpOptions options_;
  Inbox inbox_;
  std::vector<std::unique_ptr<Peer>> peers_;  // fixed after Start()

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_;
  std::atomic<bool> stopping_{false};  // relaxed: read after the wake fd
  // Relaxed: only chooses how loudly peer failures are logged.
  std::atomic<bool> shutting_down_{false};

  absl::Mutex closed_mu_;
  absl::CondVar closed_cv_;
  int open_connections_ ABSL_GUARDED_BY(closed_mu_) = 0;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_TCP_TRANSPORT_H_
