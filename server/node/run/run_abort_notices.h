// RunAbortNotices: how a daemon tells its peers that a run failed here, and
// hears that it failed on one of them, so that every daemon fails the run
// at once with the real cause instead of timing out on a healthy peer.
//
// A notice is a proto::RunAbort sent as a transport control message (tag
// kRunAbortTag) to every peer the transport still reaches, best effort: the
// coordinator fans the failure out too. A listener thread polls every
// peer's tag without blocking and hands each notice to `on_abort`.
//
// Also here: NameLostPeers, which adds the peers this transport has lost to
// a failed collective's error.
//
// Thread-safe: Broadcast from any thread, holding no lock (it sends);
// Start and Stop from one thread at a time.
#ifndef STARLING_SERVER_NODE_RUN_RUN_ABORT_NOTICES_H_
#define STARLING_SERVER_NODE_RUN_RUN_ABORT_NOTICES_H_

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "proto/worker.pb.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

// Control tag of a run's failure notice between daemons (RunAbort).
inline constexpr uint32_t kRunAbortTag = 3;

// `why` with " [peers lost: NAME: CAUSE; ...]" appended for every peer
// `transport` has lost and `why` does not name yet: a peer that died makes
// others time out on the survivors it was talking to, and the error should
// name the dead rank too. OK stays OK.
absl::Status NameLostPeers(const absl::Status& why,
                           const transport::Transport& transport);

class RunAbortNotices {
 public:
  // Called on the listener thread with the notice's run id (0: whichever
  // runs) and an Aborted status naming the peer and its error; it must not
  // block for long (it delays the next poll).
  using OnAbort = std::function<void(uint64_t run_id, const absl::Status&)>;

  // `transport` is borrowed and must outlive this.
  RunAbortNotices(transport::Transport* transport, OnAbort on_abort);
  // Stops the listener.
  ~RunAbortNotices();
  RunAbortNotices(const RunAbortNotices&) = delete;
  RunAbortNotices& operator=(const RunAbortNotices&) = delete;

  // Starts the listener if the group has peers.
  void Start();
  // Ends the listener and joins it. Idempotent.
  void Stop();

  // Sends `abort` to every other peer the transport reaches; blocks on the
  // sends, so never call it under a lock.
  void Broadcast(const proto::RunAbort& abort);

 private:
  void Listen();

  transport::Transport* const transport_;
  const OnAbort on_abort_;
  absl::Notification stop_;
  std::thread listener_;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_RUN_ABORT_NOTICES_H_
