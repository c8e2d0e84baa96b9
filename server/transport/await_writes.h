// AwaitWritesOrAbortPeer: the end of a batch of one-sided writes to one
// peer, whatever happens, so that their buffers may be freed.
//
//   Completion done;
//   transport->Write(peer, chunk, region, 0, imm, &done);
//   STARLING_RETURN_IF_ERROR(AwaitWritesOrAbortPeer(*transport, peer, done,
//                                                   deadline, [&] {
//     return absl::DeadlineExceededError("writes to ... not finished");
//   }));
//
// A write that does not finish by the deadline is ended by aborting its
// peer (Transport::AbortPeer finishes every pending write to it before it
// returns); the buffers are free on return in every case. Used by the
// collectives (OpContext) and the shard owners (PsEngine). Thread-safe as
// the transport and the completion are.
#ifndef STARLING_SERVER_TRANSPORT_AWAIT_WRITES_H_
#define STARLING_SERVER_TRANSPORT_AWAIT_WRITES_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/transport/completion.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

// How long a transport may take to report the writes AbortPeer finished;
// longer is a transport bug, and the process aborts rather than free a
// buffer under a write.
inline constexpr absl::Duration kAbortedWritesBound = absl::Seconds(10);

// Waits for every write `done` counts (all to `peer`) until `deadline`.
// Returns done.Wait's status (OK, or the first write's error) when they
// finished; otherwise aborts `peer` with `timed_out()` and returns it. No
// write `done` counts is pending on return.
absl::Status AwaitWritesOrAbortPeer(
    Transport& transport, int peer, Completion& done, absl::Time deadline,
    absl::FunctionRef<absl::Status()> timed_out);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_AWAIT_WRITES_H_
