// TcpTransport: the Transport over TCP (transport.h), the default between
// machines. Create() listens, forms the all-to-all mesh with a versioned,
// authenticated handshake (mesh.h) and starts one event-loop thread; frames
// follow frame_format.md.
//
// Data path. Write() runs on the caller's thread: it encodes a header and,
// when nothing is queued on the socket, gathers header + payload into it
// with one non-blocking sendmsg() (no copy of the payload, no thread hop);
// what the socket does not take, the event loop sends when it becomes
// writable. A write's Completion finishes once the kernel has taken its last
// byte (for a small write, before Write() returns): its buffer may then be
// reused. No acknowledgement travels back (frame_format.md). Writes of at
// least stripe_min_bytes are split across the peer's sockets_per_peer
// connections. The loop (epoll, level-triggered) reads payloads straight
// into registered regions and batches small frames through a staging
// buffer. WaitForWrite() spins up to wait_spin (50 us) before sleeping, so a
// small write's hot path is one sendmsg() on the writer's thread, one epoll
// wake-up of the receiver's loop and, usually, no futex wake-up. A write the
// receiver rejects (past its region's end) is DataLoss there; the receiver
// sends it back as an ERROR frame on every connection and closes, and it
// becomes the writer's sticky status for that peer (the write's own Completion
// may already have finished Ok). The send buffer is capped at 256 KiB by
// default, so that little of one step's data queues in front of the next's
// (tcp_options.h); the receive buffer is left to the kernel's autotuning.
//
// Failures. A peer's EOF or reset, a malformed frame, an out-of-range write
// or AbortPeer() fail that peer: its sticky status fails pending and later
// writes and wakes waits on it. The destructor queues GOODBYE behind every
// frame already queued, so those are flushed first, shuts each socket's
// sending side once flushed, waits (bounded by shutdown_timeout) for peers
// to close, then joins the loop. A peer that reads GOODBYE fails only writes
// it has not yet handed to its kernel; writes already sent stay Ok.
//
// Thread-safe (every Transport method, from any thread). Threads: one event
// loop, named in logs by its thread id; while Create() forms the mesh, one
// more accepts and handshakes (acceptor.h).
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
#include "server/transport/frame.h"
#include "server/transport/inbox_transport.h"
#include "server/transport/tcp/tcp_options.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {
namespace tcp {

class TcpConnection;

class TcpTransport : public InboxTransport {
 public:
  // Binds peers[rank] (Unavailable "address 127.0.0.1:7001 already in use
  // (rank 1)"), or takes over options.listen_fd, connects to every other rank
  // and handshakes (authenticating with options.cluster_secret), then
  // returns; the listening socket is closed either way. InvalidArgument for
  // bad options or a listen_fd that is not a listening socket; see
  // FormMesh() for the rest.
  static absl::StatusOr<std::unique_ptr<TcpTransport>> Create(
      const TcpOptions& options);

  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;
  ~TcpTransport() override;

  // The rest of Transport is InboxTransport's.
  std::string PeerName(int rank) const override;

 private:
  struct Peer;

  explicit TcpTransport(const TcpOptions& options);

  absl::Status Start(int listen_fd);
  void Loop();
  void Wake();
  void HandleReadable(TcpConnection* connection, uint32_t events);
  void HandleWakeup();
  // Writes of at least stripe_min_bytes are striped over the connections.
  void PostWrite(int peer, absl::Span<const std::byte> data, RegionId remote,
                 uint64_t remote_offset_bytes, uint32_t imm,
                 Completion* done) override;
  // Control messages of one peer share connection 0: that keeps them in
  // order per tag.
  absl::Status PostControl(int peer, const FrameHeader& header,
                           std::vector<std::byte> message) override;
  // With one connection per peer both frames leave in one gather on it;
  // otherwise as two posts.
  absl::Status PostControlThenWrite(int peer, const FrameHeader& control,
                                    std::vector<std::byte> message,
                                    absl::Span<const std::byte> data,
                                    RegionId remote,
                                    uint64_t remote_offset_bytes, uint32_t imm,
                                    Completion* done) override;
  // Fails every connection to `peer`; with `tell_peer`, each carries the
  // ERROR frame.
  void FailPeer(int peer, const absl::Status& why, bool tell_peer,
                bool orderly) override;
  // The same; `vanished`: the peer's connection ended under us (closed or
  // reset, no GOODBYE or ERROR), which a first failure reports to
  // options_.on_peer_vanished.
  void FailPeer(int peer, const absl::Status& why, bool tell_peer, bool orderly,
                bool vanished);
  void CloseConnection(TcpConnection* connection);

  const TcpOptions options_;
  std::vector<std::unique_ptr<Peer>> peers_;  // fixed after Start()

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_;
  std::atomic<bool> stopping_{false};  // relaxed: read after the wake fd

  absl::Mutex closed_mu_;
  absl::CondVar closed_cv_;
  int open_connections_ ABSL_GUARDED_BY(closed_mu_) = 0;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_TCP_TRANSPORT_H_
