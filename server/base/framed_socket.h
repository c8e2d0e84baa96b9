// Length-prefixed frames on a connected stream socket (the worker <-> daemon
// unix socket, proto/worker.proto): a 4-byte little-endian payload length,
// then the payload, at most kMaxFrameBytes. A frame may carry one file
// descriptor as SCM_RIGHTS ancillary data (unix sockets only).
// Stateless functions; thread-safe as long as one thread writes and one
// thread reads a given socket at a time.
#ifndef STARLING_SERVER_BASE_FRAMED_SOCKET_H_
#define STARLING_SERVER_BASE_FRAMED_SOCKET_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/base/scoped_fd.h"

namespace starling {

inline constexpr size_t kMaxFrameBytes = size_t{16} << 20;

// Writes one frame, with `pass_fd` attached when >= 0. Blocks until the
// kernel took every byte. Unavailable if the peer closed; InvalidArgument
// for a payload above kMaxFrameBytes.
absl::Status WriteFrame(int fd, absl::string_view payload, int pass_fd = -1);

struct Frame {
  std::string payload;
  // A descriptor that came with the frame (the caller's now), or none.
  ScopedFd received_fd;
};

// Reads one frame, blocking. Unavailable at end of stream (the message says
// whether it came between frames or inside one); DataLoss for a length above
// kMaxFrameBytes.
absl::StatusOr<Frame> ReadFrame(int fd);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_FRAMED_SOCKET_H_
