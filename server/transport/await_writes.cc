#include "server/transport/await_writes.h"

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace transport {

absl::Status AwaitWritesOrAbortPeer(
    Transport& transport, int peer, Completion& done, absl::Time deadline,
    absl::FunctionRef<absl::Status()> timed_out) {
  const std::string what = absl::StrCat("writes to ", transport.PeerName(peer));
  absl::Status written = done.Wait(deadline, what);
  if (!absl::IsDeadlineExceeded(written) || done.pending() == 0) {
    return written;
  }
  written = timed_out();
  // Closing the peer finishes our writes to it (AbortPeer's contract), so
  // this wait returns at once; the bound only turns a transport that broke
  // the contract into a crash instead of a hang or a freed buffer.
  transport.AbortPeer(peer, written);
  done.Wait(absl::Now() + kAbortedWritesBound, what).IgnoreError();
  STARLING_CHECK(done.pending() == 0)
      << done.pending() << " " << what << " still pending "
      << absl::FormatDuration(kAbortedWritesBound)
      << " after the peer was aborted";
  return written;
}

}  // namespace transport
}  // namespace starling
