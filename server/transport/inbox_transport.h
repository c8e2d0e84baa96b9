// InboxTransport: what the stream transports (tcp/, shm/) share above their
// byte streams. It owns the Inbox (inbox.h) and implements the Transport
// calls that only need it: region registration, waits, control receipt and
// peer status, plus the argument and sticky-status checks in front of
// Write() and SendControl() and AbortPeer(). A subclass moves the bytes
// (PostWrite(), PostControl()), fails a peer's connections (FailPeer()) and
// names peers (PeerName()).
//
// Thread-safe, as Transport requires of every method.
#ifndef STARLING_SERVER_TRANSPORT_INBOX_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_INBOX_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"
#include "server/transport/frame.h"
#include "server/transport/inbox.h"
#include "server/transport/transport.h"
#include "server/transport/write_path.h"

namespace starling {
namespace transport {

class InboxTransport : public Transport {
 public:
  InboxTransport(const InboxTransport&) = delete;
  InboxTransport& operator=(const InboxTransport&) = delete;
  ~InboxTransport() override = default;

  int rank() const final { return rank_; }
  int size() const final { return size_; }
  absl::Status RegisterRegion(RegionId id, absl::Span<std::byte> memory) final;
  absl::Status DeregisterRegion(RegionId id) final;
  void RetireRegions(RegionId first, RegionId end) final;
  uint64_t stale_writes_dropped() const final;
  // InvalidArgument for a bad peer or an offset + length that overflows; the
  // peer's sticky status if it failed; else PostWrite().
  void Write(int peer, absl::Span<const std::byte> data, RegionId remote,
             uint64_t remote_offset_bytes, uint32_t imm,
             Completion* done) final;
  absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                           absl::Time deadline) final;
  // InvalidArgument for a bad peer or a message above max_control_bytes();
  // the peer's sticky status if it failed (before or while posting); else
  // PostControl().
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) final;
  // Both frames through PostControlThenWrite() when the peer is valid and
  // not failed, both sizes are acceptable and its writes travel on the
  // stream; otherwise the two calls, each with its own checks.
  absl::Status SendControlThenWrite(int peer, uint32_t tag,
                                    absl::Span<const std::byte> message,
                                    absl::Span<const std::byte> data,
                                    RegionId remote,
                                    uint64_t remote_offset_bytes, uint32_t imm,
                                    Completion* done) final;
  absl::StatusOr<std::vector<std::byte>> RecvControl(int peer, uint32_t tag,
                                                     absl::Time deadline) final;
  absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag) override;
  size_t max_control_bytes() const final { return max_control_bytes_; }
  absl::Status PeerStatus(int peer) const final;
  // Ignores a bad peer; an Ok `why` becomes Aborted "aborted".
  void AbortPeer(int peer, const absl::Status& why) final;

  // Bytes held for regions not registered yet (for tests and metrics).
  size_t early_bytes() const { return inbox_.early_bytes(); }

  // From now on the writes between this rank and each of `peers` travel over
  // `path` (write_path.h) instead of this transport's stream; the rest
  // (control messages, liveness, failures) stays here. Call before the first
  // Write() to those peers, at most once per peer: InvalidArgument for a bad
  // or already adopted peer. A peer that has failed already fails the path's
  // side at once.
  absl::Status AdoptWritePath(std::unique_ptr<WritePath> path,
                              const std::vector<int>& peers);

  // How writes to `peer` travel: the adopted path's name, or `stream_name`.
  std::string PathName(int peer, const std::string& stream_name) const;

 protected:
  // `inbox_options` gives rank and size; its callbacks may call the
  // subclass's methods (they run only once the subclass is constructed).
  InboxTransport(Inbox::Options inbox_options, size_t max_control_bytes);

  // Sends the WRITE frame(s) of a checked Write(): `peer` is valid and was
  // not failed, and `done` already counts this write (done->Add(1) was
  // called): finish it, or hand it to a FrameSender that will.
  virtual void PostWrite(int peer, absl::Span<const std::byte> data,
                         RegionId remote, uint64_t remote_offset_bytes,
                         uint32_t imm, Completion* done) = 0;

  // Queues CONTROL frame `header` with `message` to a valid peer, in order
  // per (peer, tag). An error fails the peer (SendControl() then returns its
  // sticky status).
  virtual absl::Status PostControl(int peer, const FrameHeader& header,
                                   std::vector<std::byte> message) = 0;

  // Queues CONTROL frame `control` with `message`, then the WRITE frame(s)
  // of a checked write (as PostWrite(): `done` already counts it), to a
  // valid peer whose writes travel on the stream. A stream that carries both
  // queues them together; the default posts one, then the other. Returns an
  // error that fails the peer; `done` is finished or handed on either way.
  virtual absl::Status PostControlThenWrite(
      int peer, const FrameHeader& control, std::vector<std::byte> message,
      absl::Span<const std::byte> data, RegionId remote,
      uint64_t remote_offset_bytes, uint32_t imm, Completion* done);

  // Fails `peer` with `why` (unless it already failed) and its connections;
  // `tell_peer` sends the sticky status to the peer as an ERROR frame first.
  // `orderly`: the peer said GOODBYE.
  virtual void FailPeer(int peer, const absl::Status& why, bool tell_peer,
                        bool orderly) = 0;

  // Logs that `peer` failed with `sticky`: INFO when `orderly` or shutting
  // down, else ERROR naming the peer lost.
  void LogPeerFailure(int peer, const absl::Status& sticky, bool orderly) const;

  // 0 <= peer < size() and peer != rank().
  bool ValidPeer(int peer) const;
  // SendControl()'s checks: a valid peer, a message within
  // max_control_bytes, the peer not failed (its sticky status).
  absl::Status CheckControl(int peer, size_t message_bytes) const;
  // Write()'s checks of its arguments: a valid peer, a range that does not
  // overflow. (The peer's sticky status is checked after them.)
  absl::Status CheckWrite(int peer, size_t bytes,
                          uint64_t remote_offset_bytes) const;

  // Peer failures from now on are expected and logged at INFO.
  void BeginShutdown() {
    shutting_down_.store(true, std::memory_order_relaxed);
  }

  Inbox* inbox() { return &inbox_; }

  // The subclass's destructor calls DrainWritePaths() before it says GOODBYE
  // (writes already posted over a path land first), and StopWritePaths()
  // once its peers have closed, before its own members go.
  void DrainWritePaths(absl::Time deadline);
  void StopWritePaths();

  // The subclass's FailPeer() calls this: the path carrying `peer`'s writes
  // fails them with `why`.
  void FailWritePath(int peer, const absl::Status& why);

 private:
  const int rank_;
  const int size_;
  const size_t max_control_bytes_;
  Inbox inbox_;
  // Relaxed: only chooses how loudly peer failures are logged.
  std::atomic<bool> shutting_down_{false};
  // The adopted paths; they live as long as this transport. No lock is held
  // while they are called.
  std::vector<WritePath*> Paths();

  // Adopted paths (owned) and, per peer, the one carrying its writes (null:
  // the stream). Acquire/release: set once per peer by AdoptWritePath().
  // Declared after inbox_: a path's thread delivers into it until Stop().
  absl::Mutex paths_mu_;
  std::vector<std::unique_ptr<WritePath>> paths_ ABSL_GUARDED_BY(paths_mu_);
  std::unique_ptr<std::atomic<WritePath*>[]> path_of_;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_INBOX_TRANSPORT_H_
