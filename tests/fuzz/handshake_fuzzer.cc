// libFuzzer harness for the handshake parsers: HELLO (DecodeHelloFrame,
// CheckHello), CHALLENGE (DecodeChallengeBody) and the Handshaker state
// machine of either side, fed the input as what the peer sent.
//
// Input: byte 0 chooses the setting: bit 0 the side (accepting when clear),
// bit 1 a cluster secret, bit 2 a loopback peer, bit 3 insecure, bit 4
// whether the rest is read as frames whose header checksums the harness
// fills in (frame_stream.h), bits 5-7 how the stream is cut into reads.
// Besides crashes, the harness checks what must always hold: the machine
// never asks for more than a frame's worth of bytes, and with a secret the
// accepting side never admits a peer (the fuzzer cannot forge HMAC-SHA256).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/transport/auth.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"
#include "server/transport/tcp/handshaker.h"
#include "tests/fuzz/frame_stream.h"

namespace starling {
namespace fuzz {
namespace {

using transport::tcp::HandshakeConfig;
using transport::tcp::Handshaker;

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "handshake_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

std::string Name(int rank) { return absl::StrCat("rank ", rank, " (fuzz)"); }

void FuzzHandshake(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t mode = data[0];
  const absl::Span<const uint8_t> raw(data + 1, size - 1);

  // The parsers on their own, on the raw bytes.
  transport::Hello local;
  local.sender_rank = 1;
  local.group_size = 4;
  local.sockets_per_peer = 2;
  absl::StatusOr<transport::Hello> hello = transport::DecodeHelloFrame(raw);
  if (hello.ok()) {
    local.socket_index = hello->socket_index;
    local.receiver_rank = hello->sender_rank;
    (void)transport::CheckHello(local, *hello, -1, Name);
    (void)transport::CheckHello(local, *hello, 0, Name);
  }
  (void)transport::DecodeChallengeBody(
      raw.subspan(0, std::min(raw.size(), transport::kChallengeBodyBytes)));

  // One side of a handshake.
  const bool connecting = mode & 1;
  const bool secret = mode & 2;
  HandshakeConfig config;
  config.role = connecting ? HandshakeConfig::Role::kConnect
                           : HandshakeConfig::Role::kAccept;
  config.local.sender_rank = 1;
  config.local.group_size = 4;
  config.local.sockets_per_peer = 2;
  if (connecting) {
    config.local.receiver_rank = 0;
    config.local.socket_index = 1;
  }
  if (secret) config.secret = "fuzz secret";
  config.peer_is_loopback = mode & 4;
  config.insecure = mode & 8;
  config.peer_address = "192.0.2.7:40000";
  config.name = Name;
  for (size_t i = 0; i < config.nonce.size(); ++i) config.nonce[i] = i;
  Handshaker handshaker(config);

  const std::vector<uint8_t> stream =
      (mode & 16) ? BuildFrameStream(raw.data(), raw.size())
                  : std::vector<uint8_t>(raw.begin(), raw.end());
  std::vector<uint8_t> out;
  if (!handshaker.Start(&out).ok()) return;
  size_t at = 0;
  for (size_t reads = 0; at < stream.size(); ++reads) {
    const size_t wanted = handshaker.BytesWanted();
    if (wanted == 0) break;
    Check(wanted <=
              transport::kFrameHeaderBytes + transport::kMaxErrorMessageBytes,
          "asks for more than a frame");
    const size_t n =
        std::min({wanted, stream.size() - at, ReadSize(mode >> 5, reads)});
    (void)handshaker.Consume(stream.data() + at, n, &out);
    at += n;
    if (handshaker.state() == Handshaker::State::kAuthenticated) {
      Check(!secret, "admitted a peer that never proved the secret");
      Check(handshaker.hello_checked(), "admitted a peer without a HELLO");
      if (at % 2 == 0) {
        handshaker.Admit(&out);
      } else {
        handshaker.Refuse(absl::FailedPreconditionError("slot taken"), &out);
      }
    }
  }
  if (connecting && secret) {
    Check(handshaker.state() != Handshaker::State::kDone,
          "connected to a peer that never proved the secret");
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace starling

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  starling::fuzz::FuzzHandshake(data, size);
  return 0;
}
