// Handshaker: one side of a data connection's handshake (frame_format.md,
// "Handshake"), as a state machine without I/O. The caller reads exactly
// BytesWanted() bytes at a time from the socket, feeds them to Consume()
// and sends whatever it appends to the output; so the handshake never reads
// a byte of the data that follows it, and the same code runs on blocking
// sockets (the connecting side, mesh.cc) and under epoll (the accepting
// side, acceptor.h) or a fuzzer.
//
//   connecting side                       accepting side
//   HELLO, CHALLENGE(mode, nonce_c)  -->
//                                    <--  HELLO, CHALLENGE(mode, nonce_a)
//                                         [, PROOF(accept)]
//   [PROOF(connect)]                 -->
//                                    <--  WELCOME, once the slot is claimed
//
// With a cluster secret or a group key both sides prove they know it
// (auth.h); without a cluster secret a peer is accepted only from a
// loopback address, unless insecure. Either
// side may answer with ERROR instead of its next frame and close.
//
// Thread-compatible.
#ifndef STARLING_SERVER_TRANSPORT_TCP_HANDSHAKER_H_
#define STARLING_SERVER_TRANSPORT_TCP_HANDSHAKER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/transport/auth.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"

namespace starling {
namespace transport {
namespace tcp {

struct HandshakeConfig {
  enum class Role { kConnect, kAccept };
  Role role = Role::kConnect;
  // Our HELLO. Connecting side: complete (receiver_rank is the rank dialled,
  // socket_index this connection's). Accepting side: socket_index and
  // receiver_rank are taken from the peer's HELLO.
  Hello local;
  // What both sides prove they know (the cluster secret and the group
  // key); empty: nothing.
  std::string secret;
  // `secret` is the coordinator's group key alone (no cluster secret):
  // peers must still be on loopback unless insecure.
  bool group_key_only = false;
  bool insecure = false;
  // Whether the peer's address is a loopback one, and that address
  // ("10.0.0.9:51234") for messages.
  bool peer_is_loopback = false;
  std::string peer_address;
  RankNamer name;
  // Ours; fresh and random for every connection (RandomNonce()).
  Nonce nonce = {};
};

class Handshaker {
 public:
  enum class State {
    kRunning,
    // Accepting side: the peer proved who it is; claim its slot, then call
    // Admit() or Refuse().
    kAuthenticated,
    kDone,
    kFailed,
  };

  explicit Handshaker(HandshakeConfig config);
  Handshaker(const Handshaker&) = delete;
  Handshaker& operator=(const Handshaker&) = delete;

  // Connecting side: appends HELLO and CHALLENGE. Unauthenticated (and
  // nothing to send) if policy forbids the peer: no secret, a peer not on
  // loopback and not insecure. Accepting side: appends nothing.
  absl::Status Start(std::vector<uint8_t>* out);

  // Bytes the next read should ask for; 0 unless kRunning.
  size_t BytesWanted() const;

  // Consumes n <= BytesWanted() bytes from the peer and appends what to send
  // to `out`. An error ends the handshake (kFailed): then `out` may end with
  // an ERROR frame telling the peer why (send it, best effort, and close).
  // Codes: the peer's own code for its ERROR frame (refused_by_peer());
  // DataLoss for a malformed or unexpected frame; FailedPrecondition for a
  // HELLO mismatch (CheckHello()); Unauthenticated for a failed proof or a
  // peer the secret policy refuses.
  absl::Status Consume(const uint8_t* data, size_t n,
                       std::vector<uint8_t>* out);

  // Accepting side, kAuthenticated: appends WELCOME (kDone) or ERROR with
  // `why` (kFailed).
  void Admit(std::vector<uint8_t>* out);
  void Refuse(const absl::Status& why, std::vector<uint8_t>* out);

  State state() const { return state_; }
  // The peer's HELLO; meaningful once it passed CheckHello() (the accepting
  // side then knows which rank and socket the peer claims).
  const Hello& remote() const { return remote_; }
  bool hello_checked() const { return hello_checked_; }
  // The failure is the peer's ERROR frame.
  bool refused_by_peer() const { return refused_by_peer_; }

 private:
  enum class Step { kHello, kChallenge, kProof, kWelcome, kNone };

  absl::Status OnFrame(std::vector<uint8_t>* out);
  absl::Status OnHello(std::vector<uint8_t>* out);
  absl::Status OnChallenge(std::vector<uint8_t>* out);
  absl::Status OnProof(std::vector<uint8_t>* out);
  absl::Status PeerError();
  // Appends our CHALLENGE: the mode our secret implies, and our nonce.
  void AppendChallenge(std::vector<uint8_t>* out) const;
  // Appends ERROR with `why` and fails with it.
  absl::Status Fail(const absl::Status& why, std::vector<uint8_t>* out);
  std::string Who() const;
  bool has_secret() const { return !config_.secret.empty(); }
  // A secret that did not travel over the control plane.
  bool has_cluster_secret() const {
    return has_secret() && !config_.group_key_only;
  }

  const HandshakeConfig config_;
  Hello local_;
  Hello remote_;
  bool hello_checked_ = false;
  bool refused_by_peer_ = false;
  State state_ = State::kRunning;
  Step step_ = Step::kHello;
  Transcript transcript_;

  // The frame being read: header, then payload.
  uint8_t header_bytes_[kFrameHeaderBytes];
  FrameHeader header_;
  bool in_payload_ = false;
  std::vector<uint8_t> payload_;
  size_t have_ = 0;
};

}  // namespace tcp
}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_TCP_HANDSHAKER_H_
