// The data-plane transport: one interface with memory-region semantics, so
// that a peer daemon looks like a device with memory (the RDMA-as-device idea
// of "Fast Distributed Deep Learning over RDMA", EuroSys'19).
//
//   - A rank registers a region of its memory under a RegionId that every
//     rank agrees on (the collective layer derives it from the op sequence
//     number), so no address exchange is needed before a write.
//   - Write() copies a local range into a peer's registered region at an
//     offset, one-sided, carrying a 32-bit immediate value. The writer learns
//     that its buffer is reusable through a Completion; the region's owner
//     learns that the bytes have landed through WaitForWrite().
//   - Small control messages travel beside, matched by (peer, tag).
//
// Bulk tensors never travel through gRPC or protobuf.
//
// Errors (STYLE.md §3): a peer that closed or refused: Unavailable; silent
// past the deadline: DeadlineExceeded; a frame that fails length checks:
// DataLoss; bad arguments: InvalidArgument. Every message names the peer as
// "rank R (host:port)". Once a peer's connection is lost, every pending and
// later op involving that peer fails with the same sticky status.
#ifndef STARLING_SERVER_TRANSPORT_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"

namespace starling {
namespace transport {

// Names a registered region. Chosen by the caller; the same id means the same
// buffer's role on every rank.
using RegionId = uint64_t;

// What the owner of a region learns when a peer's write has fully landed.
struct WriteNotice {
  int peer = -1;  // rank that wrote
  RegionId region = 0;
  uint64_t offset_bytes = 0;
  uint64_t length_bytes = 0;
  uint32_t imm = 0;  // the writer's immediate value
};

// Selects which landed write WaitForWrite() returns. Unset fields match any.
struct WriteMatch {
  RegionId region = 0;
  std::optional<int> peer;
  std::optional<uint32_t> imm;
};

// Thread-safe: every method may be called from any thread, concurrently.
class Transport {
 public:
  virtual ~Transport() = default;

  // This process's rank and the group size; fixed for the transport's life.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // "rank 3 (10.77.0.4:29503)": how errors and logs name a peer.
  virtual std::string PeerName(int rank) const = 0;

  // Registers `memory` as region `id`: peers' writes addressed to `id` land
  // in it. Writes that arrived before the registration are held by the
  // transport (bounded) and applied, with their notices, at registration.
  // REQUIRES: `memory` stays valid until DeregisterRegion(id) returns.
  // Returns AlreadyExists if `id` is registered, FailedPrecondition if it
  // was retired (RetireRegions()).
  virtual absl::Status RegisterRegion(RegionId id,
                                      absl::Span<std::byte> memory) = 0;

  // Ends the registration; notices not yet consumed are dropped. NotFound if
  // `id` is not registered.
  virtual absl::Status DeregisterRegion(RegionId id) = 0;

  // Retires every region id in [first, end): writes held for them are
  // dropped now, and later writes addressed to them are dropped on arrival
  // instead of being held (counted; see stale_writes_dropped()), so late
  // writes of finished ops never fill the room for early ones. A region
  // registered now keeps its registration until DeregisterRegion(); a
  // retired id cannot be registered again. Only grows: a later call may
  // extend the range (or add another); nothing is ever un-retired.
  virtual void RetireRegions(RegionId first, RegionId end) = 0;

  // Writes dropped because their region was retired, since creation: each
  // whole write counts once, however many frames it travelled in.
  virtual uint64_t stale_writes_dropped() const = 0;

  // Posts a one-sided write of `data` into `peer`'s region `remote` at
  // `remote_offset_bytes`. Returns at once; `done` is completed (with the
  // write's status) once `data` may be reused, which says nothing about
  // whether it has landed: WaitForWrite() on the owner's side says that.
  // (Stream transports complete it when their kernel or ring has taken the
  // bytes, so a peer that shuts down after receiving them cannot fail it.)
  // The receiver validates the range against its registration: a write past
  // the region's end is a DataLoss error on the receiver, and becomes the
  // writer's sticky status for that peer (naming the peer and the region),
  // which fails its later writes and waits on that peer; the write's own
  // `done` may already have completed Ok. Writes to one peer land in post
  // order per (region, imm) pair; do not rely on order across imm values.
  // REQUIRES: `data` and `done` outlive the completion; 0 <= peer < size(),
  // peer != rank().
  virtual void Write(int peer, absl::Span<const std::byte> data,
                     RegionId remote, uint64_t remote_offset_bytes,
                     uint32_t imm, Completion* done) = 0;

  // Blocks until a write matching `match` has landed in this rank's region,
  // consumes its notice and returns it (the oldest, if several match).
  // DeadlineExceeded if none by `deadline`, naming the peer waited for;
  // Unavailable if that peer (or, with no peer given, any peer) is lost.
  virtual absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                                   absl::Time deadline) = 0;

  // Sends a small control message to `peer`, delivered in order per
  // (peer, tag). Blocks until the message is queued; a lost peer returns its
  // sticky status. Messages above max_control_bytes() are InvalidArgument.
  virtual absl::Status SendControl(int peer, uint32_t tag,
                                   absl::Span<const std::byte> message) = 0;

  // Sends control message `message` with `tag` to `peer`, then posts a
  // Write() of `data`: the two calls in that order, with their own errors
  // (the control message's is returned, the write's finishes `done`). A
  // transport that carries both on one stream to `peer` queues them
  // together, so that a small write and the message leave in one system
  // call and the receiver has the message once it sees the write land (a
  // collective sends its op descriptor with its first write to a peer this
  // way: one message, one wake-up). The default makes the two calls.
  virtual absl::Status SendControlThenWrite(int peer, uint32_t tag,
                                            absl::Span<const std::byte> message,
                                            absl::Span<const std::byte> data,
                                            RegionId remote,
                                            uint64_t remote_offset_bytes,
                                            uint32_t imm, Completion* done) {
    absl::Status sent = SendControl(peer, tag, message);
    Write(peer, data, remote, remote_offset_bytes, imm, done);
    return sent;
  }

  // Receives the next control message from `peer` with `tag`.
  virtual absl::StatusOr<std::vector<std::byte>> RecvControl(
      int peer, uint32_t tag, absl::Time deadline) = 0;

  // Takes the next control message from `peer` with `tag` if one is here
  // already; nullopt if none. Never waits. A lost peer returns its sticky
  // status. The default asks RecvControl() with a deadline in the past;
  // transports override it with a plain look at their queue (the
  // collectives poll with it on every op).
  virtual absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag) {
    absl::StatusOr<std::vector<std::byte>> message =
        RecvControl(peer, tag, absl::InfinitePast());
    if (absl::IsDeadlineExceeded(message.status())) return std::nullopt;
    if (!message.ok()) return message.status();
    return std::optional<std::vector<std::byte>>(*std::move(message));
  }

  // Largest control message accepted by SendControl().
  virtual size_t max_control_bytes() const = 0;

  // Ok while `peer` is reachable; its sticky error once lost.
  virtual absl::Status PeerStatus(int peer) const = 0;

  // Declares `peer` lost with `why` (e.g. a collective's timeout naming it):
  // closes its connection, and before returning finishes every pending
  // Write() to it and wakes every wait on it with `why`, which becomes the
  // peer's sticky status. Buffers of those writes are free once it returns.
  virtual void AbortPeer(int peer, const absl::Status& why) = 0;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TRANSPORT_H_
