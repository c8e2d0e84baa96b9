// The versioned connection handshake (frame_format.md, "HELLO body"): what a
// HELLO says and the checks each side applies to its peer's. Used by the
// stream transports (tcp/, shm/). Thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_HANDSHAKE_H_
#define STARLING_SERVER_TRANSPORT_HANDSHAKE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/transport/frame.h"

namespace starling {
namespace transport {

inline constexpr size_t kHelloFrameBytes = kFrameHeaderBytes + kHelloBodyBytes;

struct Hello {
  uint8_t version = kProtocolVersion;
  uint32_t sender_rank = 0;
  uint32_t group_size = 0;
  uint32_t socket_index = 0;
  uint32_t sockets_per_peer = 1;
  uint32_t receiver_rank = 0;
  // The coordinator's group epoch the sender's group has (0: none given,
  // e.g. a transport created without a coordinator).
  uint64_t group_epoch = 0;
};

// HELLO header and body, ready to send.
void EncodeHelloFrame(const Hello& hello, uint8_t (&out)[kHelloFrameBytes]);

// Decodes a whole HELLO frame. DataLoss if the header is malformed, is not a
// HELLO, or the body checksum fails.
absl::StatusOr<Hello> DecodeHelloFrame(absl::Span<const uint8_t> bytes);

// Names a rank for messages: "rank 2 (127.0.0.1:7002)".
using RankNamer = std::function<std::string(int rank)>;

// Checks the HELLO `remote` received by the rank that sent `local` (the one
// it answers or answered with). `expected_sender` is the rank this side
// connected to, or -1 on the accepting side, where any rank above
// local.sender_rank may connect. Unavailable naming both sides when
// `remote` is of a later group epoch (this side has not re-formed yet: the
// peer may try again); FailedPrecondition naming both sides for an earlier
// group epoch, a protocol version, group size or sockets-per-peer mismatch,
// an unknown or unexpected sender rank, a socket index out of range, or a
// HELLO meant for another rank.
absl::Status CheckHello(const Hello& local, const Hello& remote,
                        int expected_sender, const RankNamer& name);

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_HANDSHAKE_H_
