// RingLink: one peer as seen through shared memory: this rank's ring in the
// peer's segment (out) and the peer's ring in this rank's segment (in), with
// the stream transport's sending and receiving halves (FrameSender,
// FrameReceiver) over them. The whole-group transport (shm_transport.h) and
// the per-peer path under a TCP transport (shm_path.h) both move their
// frames through it.
//
// Single copy (`records`, the per-peer path): the ring then carries records,
// each a 24-byte header (kind, length, address) and, for an inline record,
// its bytes. A payload of kReferenceBytes or more travels as a reference
// record instead: the reader copies it straight from the writer's memory
// into the registered region with process_vm_readv (one copy, not two),
// then counts it in the ring's refs_done and rings the writer, whose
// WriteSome() only then reports those bytes taken (so the write completes
// once the bytes are in the reader's region). The writer sends references
// only once the reader has said it can read the writer's memory
// (reads_sender: same user, ptrace allowed); otherwise everything is
// inline.
//
// WriteSome() and WantWritable() run under the sender's lock, ReadSome() and
// ServiceLink() on the owner's I/O thread only.
#ifndef STARLING_SERVER_TRANSPORT_SHM_SHM_LINK_H_
#define STARLING_SERVER_TRANSPORT_SHM_SHM_LINK_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"
#include "server/transport/frame_receiver.h"
#include "server/transport/frame_sender.h"
#include "server/transport/shm/shm_segment.h"

namespace starling {
namespace transport {
namespace shm {

// Payloads this large or larger travel by reference in a records ring.
inline constexpr size_t kReferenceBytes = size_t{32} << 10;

// The header of a record in a records ring.
struct RingRecord {
  uint32_t kind = 0;  // kInline or kReference
  uint32_t reserved = 0;
  uint64_t length = 0;
  uint64_t address = 0;  // kReference: where in the writer's memory
  static constexpr uint32_t kInline = 1;
  static constexpr uint32_t kReference = 2;
};
static_assert(sizeof(RingRecord) == 24);

struct RingLink : public ByteChannel, public ByteSource {
  int peer = -1;
  std::string name;
  pid_t pid = 0;
  std::unique_ptr<ShmSegment> remote;
  RingControl* out = nullptr;
  char* out_data = nullptr;
  uint64_t out_capacity = 0;
  RingControl* in = nullptr;
  char* in_data = nullptr;
  uint64_t in_capacity = 0;
  Doorbell* peer_bell = nullptr;  // wakes the peer's I/O thread
  Doorbell* own_bell = nullptr;   // wakes ours
  WriteTracker tracker;           // unused: writes travel in one part
  // Relaxed: only uniqueness matters; the receiver restores post order.
  std::atomic<uint32_t> next_seq{0};
  std::unique_ptr<FrameSender> sender;
  std::unique_ptr<FrameReceiver> receiver;
  std::atomic<bool> want_flush{false};  // relaxed; the doorbell orders it
  std::atomic<bool> dead{false};        // release by a failure, acquire in loop
  bool eof = false;                     // I/O thread only
  // Shutdown() marks the outgoing ring closed (the reader then sees the end
  // of the stream). False where another connection carries the goodbye and
  // the peer's loss (shm_path.h): the ring just goes quiet.
  bool close_on_shutdown = true;
  // The ring carries records (single copy); set before any byte moves.
  bool records = false;

  // Writer's side of a records ring, under the sender's lock, in bytes of
  // the sender's stream: reported taken, and put in the ring (inline or by
  // reference); the references not yet copied by the reader, oldest first
  // (the bytes from the first of them on are not reported taken).
  uint64_t reported = 0;
  uint64_t written = 0;
  struct PendingReference {
    uint64_t start = 0;  // stream offset of its first byte
    uint64_t seq = 0;    // done once the ring's refs_done reaches it
  };
  std::deque<PendingReference> refs;
  uint64_t refs_sent = 0;
  // Reader's side, I/O thread only: the record being read.
  uint32_t rec_kind = 0;
  uint64_t rec_left = 0;
  uint64_t rec_address = 0;

  // Points the link at `peer_segment` (the peer's, holding our outgoing
  // ring) and `own` (ours, holding its incoming ring), makes the sender,
  // and tells the peer that `me` mapped its segment.
  void Map(int me, ShmSegment* own, std::unique_ptr<ShmSegment> peer_segment);

  absl::StatusOr<size_t> WriteSome(const struct iovec* iov, int count) override;
  void WantWritable(bool want) override;
  void Shutdown(bool graceful) override;
  absl::StatusOr<size_t> ReadSome(const struct iovec* iov, int count) override;

  // Posts WRITE frame (one part) of `data` to `remote` at `offset` with
  // `imm` through the sender (FrameSender::PostWrite's contract); an error
  // is a channel error the owner turns into a peer failure.
  absl::Status PostWrite(absl::Span<const std::byte> data, uint64_t remote,
                         uint64_t offset, uint32_t imm, Completion* done);
  // Posts frame `control` with `message` and then that WRITE frame in one
  // go (FrameSender::PostFrameThenWrite's contract).
  absl::Status PostControlThenWrite(const FrameHeader& control,
                                    std::vector<std::byte> message,
                                    absl::Span<const std::byte> data,
                                    uint64_t remote, uint64_t offset,
                                    uint32_t imm, Completion* done);

 private:
  absl::StatusOr<size_t> WriteRecords(const struct iovec* iov, int count);
  absl::StatusOr<size_t> ReadRecords(const struct iovec* iov, int count);
};

// The owner's I/O thread: until `stopping`, runs `each_turn` and `poll`
// (true: it moved something), polls up to `idle_polls` times (yielding)
// once idle, then sleeps on `bell` until it rings or `longest_sleep` passes.
void DoorbellLoop(Doorbell* bell, const std::atomic<bool>& stopping,
                  int idle_polls, absl::Duration longest_sleep,
                  const std::function<void()>& each_turn,
                  const std::function<bool()>& poll);

// Whether this process can read `pid`'s memory at `address`, where the
// 8 bytes `expected` are (the HELLO's probe): the test a reader makes before
// it sets reads_sender.
bool CanReadProcess(pid_t pid, uint64_t address, uint64_t expected);

// What ServiceLink() reports to its owner.
struct LinkService {
  bool progress = false;
  // The incoming ring ended (closed by its writer) during this pass.
  bool eof = false;
};

// One pass of the owner's I/O thread over `link`: after a failure, reads
// and drops what the peer still writes until it closes; otherwise retries a
// paused landing when `recheck` (a registration changed), flushes what the
// sender queued and receives what arrived. A failure goes to `fail` (the
// receiver's result), after which the link is dead.
LinkService ServiceLink(
    RingLink* link, bool recheck,
    const std::function<void(const FrameReceiver::Result& result)>& fail);

}  // namespace shm
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_SHM_SHM_LINK_H_
