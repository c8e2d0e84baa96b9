// FrameReceiver: the receiving half of one stream connection. It reads
// frames from a ByteSource, lands WRITE payloads straight in the registered
// region (no intermediate copy for large payloads; small frames are batched
// through a staging buffer) and hands everything else to the Inbox. Writes
// are not acknowledged (frame_format.md): a rejected one ends the connection
// with an ERROR frame, which the transport sends.
//
// Confined to the transport's I/O thread.
#ifndef STARLING_SERVER_TRANSPORT_FRAME_RECEIVER_H_
#define STARLING_SERVER_TRANSPORT_FRAME_RECEIVER_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/transport/frame.h"
#include "server/transport/inbox.h"

namespace starling {
namespace transport {

// A non-blocking byte stream from one peer.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Scatters available bytes into `iov` without blocking; returns how many
  // (0: none available now), or the status that ends the connection (end of
  // stream: Unavailable "<peer> closed the connection").
  virtual absl::StatusOr<size_t> ReadSome(const struct iovec* iov,
                                          int count) = 0;
};

class FrameReceiver {
 public:
  struct Result {
    // Not ok: the connection is over. `send_error` says whether the remote
    // should be told (an ERROR frame), `orderly` that the peer said GOODBYE.
    absl::Status error;
    bool send_error = false;
    bool orderly = false;
    // The connection itself ended (closed or reset without GOODBYE or
    // ERROR): the peer process may be gone.
    bool vanished = false;
    // No more bytes available now (a short read); otherwise call again.
    bool drained = false;
    // Waiting for a region registration (backpressure); see Resume().
    bool paused = false;
  };

  // `inbox` must outlive the receiver.
  FrameReceiver(int peer, const RankNamer& name, Inbox* inbox,
                size_t max_control_bytes);
  FrameReceiver(const FrameReceiver&) = delete;
  FrameReceiver& operator=(const FrameReceiver&) = delete;
  ~FrameReceiver();

  // Reads and handles frames until the source has nothing more, a bounded
  // number of reads was done, or the receiver pauses or fails.
  Result Receive(ByteSource* source);

  // Retries a paused WRITE; true if the receiver may read again.
  Result Resume();
  bool paused() const { return paused_; }

  // Payload bytes of the frame being read that have not arrived yet (0
  // between frames).
  uint64_t payload_bytes_to_come() const {
    return state_ == State::kPayload ? remaining_ : 0;
  }

  // After a deregistration: stops landing into a region that is leaving.
  void RecheckLanding();

  // The connection is gone: releases a landing in progress.
  void Abandon();

 private:
  enum class State { kHeader, kPayload };
  enum class Kind { kWrite, kControl, kError };

  Result BeginFrame(const FrameHeader& header);
  Result StartWrite();
  Result FinishFrame();
  Result Fail(absl::Status error, bool send_error) const;
  // A failed read: the connection ended under the receiver.
  Result Vanished(absl::Status error) const;

  const int peer_;
  const RankNamer name_;
  Inbox* const inbox_;
  const size_t max_control_bytes_;

  // Staging buffer: unread bytes are [start_, end_).
  std::unique_ptr<uint8_t[]> staging_;
  size_t start_ = 0;
  size_t end_ = 0;

  State state_ = State::kHeader;
  Kind kind_ = Kind::kWrite;
  FrameHeader header_;
  Inbox::Landing landing_;
  std::vector<std::byte> message_;  // CONTROL and ERROR payloads
  std::byte* dst_ = nullptr;        // nullptr: discard
  uint64_t remaining_ = 0;          // payload bytes still to come
  bool paused_ = false;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FRAME_RECEIVER_H_
