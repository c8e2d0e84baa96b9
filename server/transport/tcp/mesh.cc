#include "server/transport/tcp/mesh.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/transport/auth.h"
#include "server/transport/tcp/acceptor.h"

namespace starling {
namespace transport {
namespace tcp {
namespace {

// What one connecting attempt ended with.
struct Attempt {
  absl::StatusOr<ScopedFd> fd;
  // The connection failed below the handshake (closed, reset, timed out),
  // or the peer refused it for being behind (an earlier group epoch):
  // another attempt may succeed.
  bool retry = false;
};

// How often forming a mesh asks TcpOptions::give_up.
constexpr absl::Duration kGiveUpPoll = absl::Milliseconds(50);

// Why forming should stop now (TcpOptions::give_up), if it should.
std::optional<std::string> ReasonToGiveUp(const TcpOptions& options) {
  if (!options.give_up) return std::nullopt;
  return options.give_up();
}

// Runs `wait(until)` until `deadline`: at once without give_up, else in
// slices of kGiveUpPoll, asking it between them. `wait`'s status (its
// DeadlineExceeded at `deadline`), or Cancelled "<stopping>: <reason>".
absl::Status WaitHearingGiveUp(
    const TcpOptions& options, absl::Time deadline,
    const std::function<absl::Status(absl::Time until)>& wait,
    absl::string_view stopping) {
  while (true) {
    const absl::Time slice = options.give_up
                                 ? std::min(deadline, absl::Now() + kGiveUpPoll)
                                 : deadline;
    const absl::Status status = wait(slice);
    if (status.ok() || slice >= deadline || !absl::IsDeadlineExceeded(status)) {
      return status;
    }
    if (std::optional<std::string> why = ReasonToGiveUp(options)) {
      return absl::CancelledError(absl::StrCat(stopping, ": ", *why));
    }
  }
}

// One connection to `peer` and its handshake, driven with blocking reads of
// exactly the bytes the handshake wants.
Attempt TryDial(const TcpOptions& options, int peer, int socket_index,
                absl::Time deadline, const RankNamer& name) {
  const std::string who = name(peer);
  Attempt attempt;
  absl::StatusOr<ScopedFd> connected;
  const absl::Status reached = WaitHearingGiveUp(
      options, deadline,
      [&](absl::Time until) {
        connected =
            ConnectWithRetry(options.peers[peer], who, until,
                             options.initial_backoff, options.max_backoff);
        return connected.status();
      },
      absl::StrCat(name(options.rank), " stopped connecting to ", who));
  if (!reached.ok()) {
    attempt.fd = reached;
    return attempt;
  }
  ScopedFd fd = std::move(*connected);
  absl::StatusOr<RemoteEndpoint> endpoint = GetRemoteEndpoint(fd.get());
  if (!endpoint.ok()) {
    attempt.fd = endpoint.status();
    attempt.retry = true;
    return attempt;
  }
  absl::StatusOr<Nonce> nonce = RandomNonce();
  if (!nonce.ok()) {
    attempt.fd = nonce.status();
    return attempt;
  }
  HandshakeConfig config =
      HandshakeConfigFor(options, HandshakeConfig::Role::kConnect, name);
  config.local.socket_index = socket_index;
  config.local.receiver_rank = peer;
  config.peer_is_loopback = endpoint->loopback;
  config.peer_address = endpoint->address;
  config.nonce = *nonce;
  Handshaker handshaker(std::move(config));
  std::vector<uint8_t> out;
  absl::Status status = handshaker.Start(&out);
  uint8_t buffer[kFrameHeaderBytes + kMaxErrorMessageBytes];
  while (status.ok()) {
    if (!out.empty()) {
      absl::Status sent =
          SendAllUntil(fd.get(), out.data(), out.size(), deadline, who);
      out.clear();
      if (!sent.ok()) {
        attempt.fd = sent;
        attempt.retry = true;
        return attempt;
      }
    }
    if (handshaker.state() == Handshaker::State::kDone) {
      attempt.fd = std::move(fd);
      return attempt;
    }
    const size_t want = std::min(handshaker.BytesWanted(), sizeof(buffer));
    absl::Status received = RecvAllUntil(fd.get(), buffer, want, deadline, who);
    if (!received.ok()) {
      attempt.fd = received;
      attempt.retry = true;
      return attempt;
    }
    status = handshaker.Consume(buffer, want, &out);
  }
  if (!out.empty()) {
    // Best effort: the refusal is returned here either way.
    (void)SendAllUntil(fd.get(), out.data(), out.size(),
                       std::min(deadline, absl::Now() + absl::Seconds(1)), who);
  }
  // Unavailable: the peer is of an earlier group epoch (handshake.h); it
  // re-forms too, and answers a later attempt.
  attempt.retry = absl::IsUnavailable(status);
  attempt.fd = status;
  return attempt;
}

}  // namespace

HandshakeConfig HandshakeConfigFor(const TcpOptions& options,
                                   HandshakeConfig::Role role,
                                   const RankNamer& name) {
  HandshakeConfig config;
  config.role = role;
  config.local.version = options.protocol_version_for_testing;
  config.local.sender_rank = options.rank;
  config.local.group_size = options.peers.size();
  config.local.sockets_per_peer = options.sockets_per_peer;
  config.local.group_epoch = options.group_epoch;
  // The cluster secret and the group key: a peer must know both.
  config.secret = options.cluster_secret + options.group_key;
  config.group_key_only =
      options.cluster_secret.empty() && !options.group_key.empty();
  config.insecure = options.insecure;
  config.name = name;
  return config;
}

absl::StatusOr<ScopedFd> DialPeer(const TcpOptions& options, int peer,
                                  int socket_index, absl::Time deadline,
                                  const RankNamer& name) {
  absl::Duration backoff = options.initial_backoff;
  while (true) {
    Attempt attempt = TryDial(options, peer, socket_index, deadline, name);
    if (attempt.fd.ok()) return std::move(attempt.fd);
    const absl::Status& status = attempt.fd.status();
    const absl::Time now = absl::Now();
    if (!attempt.retry || now >= deadline) {
      return Annotate(
          status, absl::StrCat("while connecting ", name(options.rank), " to ",
                               name(peer)));
    }
    if (std::optional<std::string> why = ReasonToGiveUp(options)) {
      return absl::CancelledError(absl::StrCat(name(options.rank),
                                               " stopped connecting to ",
                                               name(peer), ": ", *why));
    }
    STARLING_LOG(INFO) << name(options.rank) << " retries connecting to "
                       << name(peer) << ": " << status;
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, options.max_backoff);
  }
}

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

  // Higher ranks connect to us: accept them meanwhile, each connection
  // handshaking on its own.
  std::unique_ptr<Acceptor> acceptor;
  if (me < size - 1) {
    STARLING_ASSIGN_OR_RETURN(acceptor,
                              Acceptor::Start(options, listen_fd, name));
  }
  // Connect to every lower rank.
  for (int peer = 0; peer < me; ++peer) {
    for (int s = 0; s < per_peer; ++s) {
      STARLING_ASSIGN_OR_RETURN(mesh[peer][s],
                                DialPeer(options, peer, s, deadline, name));
    }
  }
  if (acceptor != nullptr) {
    STARLING_RETURN_IF_ERROR(WaitHearingGiveUp(
        options, deadline,
        [&](absl::Time until) { return acceptor->Wait(until); },
        absl::StrCat(name(options.rank),
                     " stopped waiting for its peers' connections")));
    acceptor->TakeConnections(&mesh);
  }
  return mesh;
}

}  // namespace tcp
}  // namespace transport
}  // namespace starling
