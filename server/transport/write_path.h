// WritePath: another way to carry the writes between this rank and some of
// its peers than the transport's own stream: the fabric's one-sided writes
// (fabric/fabric_path.h). The stream transport keeps everything else for
// those peers (the authenticated connection, control messages, liveness);
// the path carries their bulk bytes, both ways, and hands what arrives to
// the transport's Inbox from its own thread, in the same frames the stream
// would (frame.h), so that every wait, early arrival and retired region
// behaves the same on every path.
//
// Lifetime: InboxTransport::AdoptWritePath() attaches a path (Attach(), which
// starts its thread) and owns it; the owning transport's destructor calls
// Drain() before it says GOODBYE and Stop() once its peers have closed.
//
// Thread-safe.
#ifndef STARLING_SERVER_TRANSPORT_WRITE_PATH_H_
#define STARLING_SERVER_TRANSPORT_WRITE_PATH_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/completion.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

class Inbox;

class WritePath {
 public:
  // What the path calls back into its transport. Both may run on the path's
  // thread; neither blocks.
  struct Sink {
    Inbox* inbox = nullptr;
    // The path found `peer` unusable (a failed or malformed write): the
    // transport fails the peer everywhere with `why`, telling it.
    std::function<void(int peer, const absl::Status& why)> fail_peer;
  };

  virtual ~WritePath() = default;

  // For logs and status: "fabric (tcp;ofi_rxm)".
  virtual std::string name() const = 0;

  // Starts delivering into `sink` (and the path's thread). Called once, by
  // InboxTransport::AdoptWritePath(), before any PostWrite().
  virtual void Attach(Sink sink) = 0;

  // InboxTransport::PostWrite()'s contract: `peer` is one of the path's and
  // has not failed; `done` already counts this write: finish it once `data`
  // may be reused.
  virtual void PostWrite(int peer, absl::Span<const std::byte> data,
                         RegionId remote, uint64_t remote_offset_bytes,
                         uint32_t imm, Completion* done) = 0;

  // `peer` failed with `why`: its pending writes finish with `why` before
  // this returns; what it writes from now on is dropped.
  virtual void FailPeer(int peer, const absl::Status& why) = 0;

  // A registration, deregistration or retirement happened: retry writes that
  // waited for room in the inbox.
  virtual void Wake() = 0;

  // Waits until every write posted so far has been taken by its receiver,
  // or until `deadline`; the path keeps receiving meanwhile and after.
  virtual void Drain(absl::Time deadline) = 0;

  // Stops the path's thread: nothing is delivered after it returns.
  virtual void Stop() = 0;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_WRITE_PATH_H_
