// FrameSender: the sending half of one stream connection (a TCP socket, a
// shared-memory ring). It queues frames, gathers header and payload into the
// channel without copying the payload, and completes each WRITE frame as
// soon as the channel has taken all of its bytes (the kernel's socket buffer
// or the peer's ring holds them, so the payload may be reused;
// frame_format.md). A write the receiver then rejects fails the connection
// with an ERROR frame, which becomes the writer's sticky status for that
// peer. ByteChannel is what a connection must offer it; WriteTracker
// completes writes split into parts.
//
// Thread-safe: application threads post (and send at once when nothing is
// queued, so a small write usually never leaves the caller's thread), the
// transport's I/O thread flushes the rest. Completions are finished with no
// lock held, on whichever of those threads handed the last byte over or saw
// the failure.
#ifndef STARLING_SERVER_TRANSPORT_FRAME_SENDER_H_
#define STARLING_SERVER_TRANSPORT_FRAME_SENDER_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {

// A non-blocking byte stream towards one peer. Called with the sender's lock
// held; implementations must not block or call back into the sender.
class ByteChannel {
 public:
  virtual ~ByteChannel() = default;

  // Takes a prefix of the gathered bytes without blocking; returns how many
  // (0 when full), or the error that ends the connection.
  virtual absl::StatusOr<size_t> WriteSome(const struct iovec* iov,
                                           int count) = 0;

  // Asks the I/O thread to call FrameSender::Flush() once the channel has
  // room (want = true), or to stop asking (false).
  virtual void WantWritable(bool want) = 0;

  // Ends the outgoing direction after what was taken (graceful = true), or
  // both directions at once.
  virtual void Shutdown(bool graceful) = 0;
};

// Completes writes whose parts travel as separate frames: the write's
// Completion is finished once, with the first error, when its last part is
// done. Thread-safe.
class WriteTracker {
 public:
  void Begin(uint32_t seq, Completion* done, int parts);
  void PartDone(uint32_t seq, const absl::Status& status);

 private:
  struct Entry {
    Completion* done = nullptr;
    int remaining = 0;
    absl::Status status;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<uint32_t, Entry> writes_ ABSL_GUARDED_BY(mu_);
};

class FrameSender {
 public:
  // `channel` and `tracker` must outlive the sender.
  FrameSender(ByteChannel* channel, WriteTracker* tracker);
  FrameSender(const FrameSender&) = delete;
  FrameSender& operator=(const FrameSender&) = delete;
  // REQUIRES: nothing is queued (Fail() was called or the queue drained), so
  // no completion is left pending.
  ~FrameSender();

  // Queues WRITE frame `header` with `header.length` bytes at `payload`
  // (borrowed until `done` is finished) and sends what the channel takes
  // now, on the calling thread, if nothing is queued before it. `done` is
  // finished (through the tracker if header.part_count > 1) once the channel
  // has taken the whole frame, possibly before PostWrite() returns, or with
  // the sticky error. Returns a channel error that the caller must turn into
  // a peer failure.
  absl::Status PostWrite(const FrameHeader& header, const std::byte* payload,
                         Completion* done);

  // Queues a frame whose payload the sender owns (CONTROL, GOODBYE). Returns
  // the sticky error if the sender failed, or a channel error as PostWrite()
  // does.
  absl::Status PostFrame(const FrameHeader& header,
                         std::vector<std::byte> payload);

  // Queues frame `frame` with `payload` (owned, as PostFrame()) and then
  // WRITE frame `header` with its payload (as PostWrite()), and sends what
  // the channel takes of both in one gather if nothing is queued before
  // them: a small write and the control message before it leave in one
  // system call, and the receiver parses the message first. If the sender
  // failed, `done` is finished with the sticky error and that error is
  // returned; otherwise returns a channel error as PostWrite() does.
  absl::Status PostFrameThenWrite(const FrameHeader& frame,
                                  std::vector<std::byte> payload,
                                  const FrameHeader& header,
                                  const std::byte* data, Completion* done);

  // Sends what the channel takes; for the I/O thread when writable.
  absl::Status Flush();

  // Fails every write not yet fully taken by the channel with `why` (and every
  // later post), best-effort sends an ERROR frame carrying `error_message`
  // first if not empty, and shuts the channel down. Idempotent.
  void Fail(const absl::Status& why, const std::string& error_message = "");

  // After the queue drains, shut the channel's outgoing direction down
  // gracefully (used after GOODBYE).
  void ShutdownWhenFlushed();

  // True when nothing is queued.
  bool Idle() const;
  bool failed() const;

 private:
  struct Item {
    uint8_t header[kFrameHeaderBytes];
    const std::byte* payload = nullptr;
    size_t payload_bytes = 0;
    std::vector<std::byte> owned;
    Completion* done = nullptr;  // WRITE frames only
    uint32_t seq = 0;
    uint32_t part_count = 0;
  };
  // A WRITE frame whose completion is due.
  struct Finished {
    Completion* done = nullptr;
    uint32_t seq = 0;
    uint32_t part_count = 0;
  };
  using FinishedList = absl::InlinedVector<Finished, 8>;

  static Item WriteItem(const FrameHeader& header, const std::byte* payload,
                        Completion* done);
  static Item OwnedItem(const FrameHeader& header,
                        std::vector<std::byte> payload);
  // Both append the WRITE frames the channel took whole to `sent`, to be
  // completed once the lock is released. Enqueue() appends `items` in order
  // and sends at once if nothing was queued before them.
  absl::Status Enqueue(absl::Span<Item> items, FinishedList* sent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FlushLocked(FinishedList* sent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Complete(const Finished& write, const absl::Status& status);
  void CompleteAll(const FinishedList& writes, const absl::Status& status);

  ByteChannel* const channel_;
  WriteTracker* const tracker_;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  size_t head_sent_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of queue_.front()
  bool want_writable_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_when_flushed_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FRAME_SENDER_H_
