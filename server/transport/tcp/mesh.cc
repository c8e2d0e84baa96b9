#include "server/transport/tcp/mesh.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

// A stray or silent client gets this long to say HELLO, so that it cannot
// hold up the group's accept loop for the whole connect window.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);

// Sends an ERROR frame with `why` (best effort) so the other side can report
// what we refused.
void SendRefusal(int fd, const absl::Status& why, absl::Time deadline) {
  const std::string text(why.message().substr(0, kMaxErrorMessageBytes));
  FrameHeader header;
  header.type = FrameType::kError;
  header.imm = static_cast<uint32_t>(why.code());
  header.length = text.size();
  uint8_t bytes[kFrameHeaderBytes];
  EncodeFrameHeader(header, bytes);
  // Best effort: the refusal is also logged and returned locally.
  (void)SendAllUntil(fd, bytes, sizeof(bytes), deadline, "peer");
  (void)SendAllUntil(fd, text.data(), text.size(), deadline, "peer");
}

// Reads a HELLO, or the ERROR frame a refusing peer sent instead (returned
// as its status).
absl::StatusOr<Hello> ReadHello(int fd, absl::Time deadline,
                                const std::string& who) {
  uint8_t frame[kHelloFrameBytes];
  STARLING_RETURN_IF_ERROR(
      RecvAllUntil(fd, frame, kFrameHeaderBytes, deadline, who));
  STARLING_ASSIGN_OR_RETURN(
      FrameHeader header,
      DecodeFrameHeader(absl::MakeConstSpan(frame, kFrameHeaderBytes)));
  if (header.type == FrameType::kError) {
    std::string text(header.length, '\0');
    STARLING_RETURN_IF_ERROR(
        RecvAllUntil(fd, text.data(), text.size(), deadline, who));
    absl::StatusCode code = static_cast<absl::StatusCode>(header.imm);
    if (header.imm == 0 || header.imm > 16) code = absl::StatusCode::kUnknown;
    return absl::Status(code, absl::StrCat(who, " refused: ", text));
  }
  if (header.type != FrameType::kHello) {
    return absl::DataLossError(absl::StrCat(
        who, " sent ", FrameTypeName(header.type), " instead of HELLO"));
  }
  STARLING_RETURN_IF_ERROR(RecvAllUntil(fd, frame + kFrameHeaderBytes,
                                        kHelloBodyBytes, deadline, who));
  return DecodeHelloFrame(absl::MakeConstSpan(frame, kHelloFrameBytes));
}

Hello LocalHello(const TcpOptions& options, int socket_index, int receiver) {
  Hello hello;
  hello.version = options.protocol_version_for_testing;
  hello.sender_rank = options.rank;
  hello.group_size = options.peers.size();
  hello.socket_index = socket_index;
  hello.sockets_per_peer = options.sockets_per_peer;
  hello.receiver_rank = receiver;
  return hello;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<ScopedFd>>> FormMesh(
    const TcpOptions& options, int listen_fd, const RankNamer& name) {
  const int size = options.peers.size();
  const int me = options.rank;
  const int per_peer = options.sockets_per_peer;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  std::vector<std::vector<ScopedFd>> mesh(size);
  for (int r = 0; r < size; ++r) {
    if (r != me) mesh[r].resize(per_peer);
  }

  // Connect to every lower rank. Lower ranks accept only after their own
  // connects, so dependencies point down and the mesh cannot deadlock.
  for (int peer = 0; peer < me; ++peer) {
    const std::string who = name(peer);
    for (int s = 0; s < per_peer; ++s) {
      STARLING_ASSIGN_OR_RETURN(
          ScopedFd fd,
          ConnectWithRetry(options.peers[peer], who, deadline,
                           options.initial_backoff, options.max_backoff));
      uint8_t frame[kHelloFrameBytes];
      const Hello local = LocalHello(options, s, peer);
      EncodeHelloFrame(local, frame);
      STARLING_RETURN_IF_ERROR(
          SendAllUntil(fd.get(), frame, sizeof(frame), deadline, who));
      absl::StatusOr<Hello> remote = ReadHello(fd.get(), deadline, who);
      if (!remote.ok()) {
        return Annotate(remote.status(), absl::StrCat("while connecting ",
                                                      name(me), " to ", who));
      }
      absl::Status checked = CheckHello(local, *remote, peer, name);
      if (!checked.ok()) {
        SendRefusal(fd.get(), checked, deadline);
        return checked;
      }
      mesh[peer][s] = std::move(fd);
    }
  }

  // Accept from every higher rank.
  int missing = (size - 1 - me) * per_peer;
  absl::Status last_refusal;
  while (missing > 0) {
    absl::StatusOr<ScopedFd> accepted = AcceptUntil(listen_fd, deadline);
    if (!accepted.ok()) {
      if (!absl::IsDeadlineExceeded(accepted.status())) {
        return accepted.status();
      }
      std::vector<std::string> absent;
      for (int r = me + 1; r < size; ++r) {
        for (int s = 0; s < per_peer; ++s) {
          if (!mesh[r][s].valid()) {
            absent.push_back(name(r));
            break;
          }
        }
      }
      return absl::DeadlineExceededError(absl::StrCat(
          name(me), " gave up after ",
          absl::FormatDuration(options.connect_timeout),
          " waiting for connections from ", absl::StrJoin(absent, ", "),
          last_refusal.ok()
              ? ""
              : absl::StrCat("; last refused: ", last_refusal.message())));
    }
    ScopedFd fd = std::move(*accepted);
    const absl::Time hello_deadline =
        std::min(deadline, absl::Now() + kHelloTimeout);
    absl::StatusOr<Hello> remote =
        ReadHello(fd.get(), hello_deadline, "a connecting peer");
    if (!remote.ok()) {
      STARLING_LOG(WARNING)
          << name(me) << " dropped a connection: " << remote.status();
      last_refusal = remote.status();
      continue;
    }
    const Hello local =
        LocalHello(options, remote->socket_index, remote->sender_rank);
    absl::Status checked = CheckHello(local, *remote, -1, name);
    if (checked.ok() &&
        mesh[remote->sender_rank][remote->socket_index].valid()) {
      checked = absl::FailedPreconditionError(
          absl::StrCat(name(remote->sender_rank), " connected socket ",
                       remote->socket_index, " twice"));
    }
    if (!checked.ok()) {
      STARLING_LOG(WARNING) << name(me) << " refused a connection: " << checked;
      SendRefusal(fd.get(), checked, hello_deadline);
      last_refusal = checked;
      continue;
    }
    uint8_t frame[kHelloFrameBytes];
    EncodeHelloFrame(local, frame);
    STARLING_RETURN_IF_ERROR(SendAllUntil(fd.get(), frame, sizeof(frame),
                                          deadline, name(remote->sender_rank)));
    mesh[remote->sender_rank][remote->socket_index] = std::move(fd);
    --missing;
  }
  return mesh;
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
