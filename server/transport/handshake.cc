#include "server/transport/handshake.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/transport/crc32c.h"

namespace starling {
namespace transport {

void EncodeHelloFrame(const Hello& hello, uint8_t (&out)[kHelloFrameBytes]) {
  FrameHeader header;
  header.version = hello.version;
  header.type = FrameType::kHello;
  header.length = kHelloBodyBytes;
  uint8_t encoded[kFrameHeaderBytes];
  EncodeFrameHeader(header, encoded);
  std::copy(encoded, encoded + kFrameHeaderBytes, out);
  uint8_t* body = out + kFrameHeaderBytes;
  PutLittleEndian32(hello.sender_rank, body + 0);
  PutLittleEndian32(hello.group_size, body + 4);
  PutLittleEndian32(hello.socket_index, body + 8);
  PutLittleEndian32(hello.sockets_per_peer, body + 12);
  PutLittleEndian32(hello.receiver_rank, body + 16);
  PutLittleEndian32(static_cast<uint32_t>(hello.group_epoch), body + 20);
  PutLittleEndian32(static_cast<uint32_t>(hello.group_epoch >> 32), body + 24);
  PutLittleEndian32(Crc32c(body, 28), body + 28);
}

absl::StatusOr<Hello> DecodeHelloFrame(absl::Span<const uint8_t> bytes) {
  STARLING_ASSIGN_OR_RETURN(FrameHeader header, DecodeFrameHeader(bytes));
  if (header.type != FrameType::kHello) {
    return absl::DataLossError(absl::StrCat("expected a HELLO frame, got ",
                                            FrameTypeName(header.type)));
  }
  if (bytes.size() < kHelloFrameBytes) {
    return absl::DataLossError(
        absl::StrCat("HELLO frame truncated: ", bytes.size(), " of ",
                     kHelloFrameBytes, " bytes"));
  }
  const uint8_t* body = bytes.data() + kFrameHeaderBytes;
  const uint32_t stored = GetLittleEndian32(body + 28);
  if (stored != Crc32c(body, 28)) {
    return absl::DataLossError("HELLO body checksum mismatch");
  }
  Hello hello;
  hello.version = header.version;
  hello.sender_rank = GetLittleEndian32(body + 0);
  hello.group_size = GetLittleEndian32(body + 4);
  hello.socket_index = GetLittleEndian32(body + 8);
  hello.sockets_per_peer = GetLittleEndian32(body + 12);
  hello.receiver_rank = GetLittleEndian32(body + 16);
  hello.group_epoch = static_cast<uint64_t>(GetLittleEndian32(body + 20)) |
                      static_cast<uint64_t>(GetLittleEndian32(body + 24)) << 32;
  return hello;
}

absl::Status CheckHello(const Hello& local, const Hello& remote,
                        int expected_sender, const RankNamer& name) {
  const int me = static_cast<int>(local.sender_rank);
  const std::string my_name = name(me);
  // The epoch first: after a re-formation the ranks and the group size
  // change with it, and the side that is ahead must learn that its peer is
  // behind (Unavailable: it dials again until the peer re-formed too), not
  // that the peer does not know its rank.
  if (remote.group_epoch != local.group_epoch) {
    // Its rank number means another daemon in this side's list: named by
    // number and epoch only.
    const std::string what =
        absl::StrCat("group epoch mismatch: rank ", remote.sender_rank,
                     " of group epoch ", remote.group_epoch, " reached ",
                     my_name, " of group epoch ", local.group_epoch);
    if (remote.group_epoch < local.group_epoch) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " (it belongs to a group the coordinator re-formed since)"));
    }
    return absl::UnavailableError(absl::StrCat(
        what, " (this daemon has not re-formed yet; its peer dials again)"));
  }
  // Only a known rank may be named through `name`.
  if (remote.sender_rank >= local.group_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "connection from unknown rank ", remote.sender_rank, " refused by ",
        my_name, ": the group has ranks 0..", local.group_size - 1));
  }
  const int them = static_cast<int>(remote.sender_rank);
  const std::string their_name = name(them);
  if (remote.version != local.version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version mismatch: ", their_name, " speaks version ",
        remote.version, ", ", my_name, " speaks version ", local.version));
  }
  if (remote.group_size != local.group_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group size mismatch: ", their_name, " has a group of ",
        remote.group_size, " ranks, ", my_name, " has ", local.group_size));
  }
  if (remote.receiver_rank != local.sender_rank) {
    return absl::FailedPreconditionError(
        absl::StrCat(their_name, " meant to reach rank ", remote.receiver_rank,
                     " but reached ", my_name, " (peer list mismatch?)"));
  }
  if (expected_sender >= 0 ? them != expected_sender : them <= me) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unexpected connection from ", their_name, " to ", my_name,
        expected_sender >= 0
            ? absl::StrCat(", which connected to rank ", expected_sender)
            : ": only higher ranks connect to a rank"));
  }
  if (remote.sockets_per_peer != local.sockets_per_peer) {
    return absl::FailedPreconditionError(
        absl::StrCat("sockets per peer mismatch: ", their_name, " uses ",
                     remote.sockets_per_peer, ", ", my_name, " uses ",
                     local.sockets_per_peer));
  }
  if (remote.socket_index >= remote.sockets_per_peer) {
    return absl::FailedPreconditionError(
        absl::StrCat(their_name, " sent socket index ", remote.socket_index,
                     " of only ", remote.sockets_per_peer));
  }
  return absl::OkStatus();
}

}  // namespace transport
}  // namespace starling
