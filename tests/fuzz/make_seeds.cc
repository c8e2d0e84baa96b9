// Writes the seed corpora of the fuzz harnesses (corpus/<harness>/), so that
// they can be regenerated when the wire format changes (a version bump makes
// every seed's HELLO stale):
//
//   bazel run //tests/fuzz:make_seeds -- "$PWD/tests/fuzz/corpus"
//
// Each seed is one byte choosing the harness's setting (see the harness's
// comment) followed by frames: whole ones, or in the "framed" form the
// harness completes (44 header bytes without the checksum, then payload).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "server/transport/auth.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"

namespace starling {
namespace fuzz {
namespace {

using Bytes = std::vector<uint8_t>;
using transport::FrameHeader;
using transport::FrameType;

Bytes Frame(FrameHeader header, const Bytes& payload) {
  header.length = payload.size();
  uint8_t encoded[transport::kFrameHeaderBytes];
  transport::EncodeFrameHeader(header, encoded);
  Bytes bytes(encoded, encoded + sizeof(encoded));
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

// The framed form: the header's checksum left for the harness to fill in.
Bytes Strip(Bytes frame) {
  frame.erase(frame.begin() + 44, frame.begin() + 48);
  return frame;
}

Bytes Framed(const FrameHeader& header, const Bytes& payload) {
  return Strip(Frame(header, payload));
}

FrameHeader Write(uint64_t region, uint64_t offset, uint32_t seq,
                  uint8_t parts = 1, uint32_t imm = 0) {
  FrameHeader header;
  header.type = FrameType::kWrite;
  header.region = region;
  header.offset = offset;
  header.seq = seq;
  header.part_count = parts;
  header.imm = imm;
  return header;
}

FrameHeader Type(FrameType type, uint32_t imm = 0) {
  FrameHeader header;
  header.type = type;
  header.imm = imm;
  return header;
}

Bytes Fill(size_t n, uint8_t value) { return Bytes(n, value); }
Bytes Text(const std::string& text) { return Bytes(text.begin(), text.end()); }

// A HELLO of a group of 4 with 2 sockets per peer.
Bytes Hello(uint32_t sender, uint32_t receiver, uint32_t socket) {
  transport::Hello hello;
  hello.sender_rank = sender;
  hello.receiver_rank = receiver;
  hello.group_size = 4;
  hello.sockets_per_peer = 2;
  hello.socket_index = socket;
  uint8_t frame[transport::kHelloFrameBytes];
  transport::EncodeHelloFrame(hello, frame);
  return Bytes(frame, frame + sizeof(frame));
}

Bytes Challenge(transport::AuthMode mode, uint8_t seed) {
  transport::Challenge challenge;
  challenge.mode = mode;
  for (size_t i = 0; i < challenge.nonce.size(); ++i) {
    challenge.nonce[i] = seed + i;
  }
  uint8_t frame[transport::kChallengeFrameBytes];
  transport::EncodeChallengeFrame(challenge, frame);
  return Bytes(frame, frame + sizeof(frame));
}

Bytes ProofOf(uint8_t value) {
  transport::Proof proof;
  proof.fill(value);
  uint8_t frame[transport::kProofFrameBytes];
  transport::EncodeProofFrame(proof, frame);
  return Bytes(frame, frame + sizeof(frame));
}

void Save(const std::string& path, uint8_t setting,
          const std::vector<Bytes>& frames) {
  Bytes bytes{setting};
  for (const Bytes& frame : frames) {
    bytes.insert(bytes.end(), frame.begin(), frame.end());
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void FrameSeeds(const std::string& dir) {
  // Byte 0: bit 0 framed, bits 1-3 the read pattern. Region 1 is registered
  // (4 KiB), 2 registered empty, 100..199 retired; early room 4 KiB.
  auto framed = [](int pattern) {
    return static_cast<uint8_t>(1 | pattern << 1);
  };
  auto raw = [](int pattern) { return static_cast<uint8_t>(pattern << 1); };
  Save(dir + "write_control_goodbye", framed(2),
       {Framed(Write(1, 8, 0), Fill(16, 0xaa)),
        Framed(Type(FrameType::kControl, 3), Text("hello")),
        Framed(Type(FrameType::kGoodbye), {})});
  Save(dir + "bytewise_write", framed(0),
       {Framed(Write(1, 0, 0, 1, 7), Fill(40, 1)), Framed(Write(2, 0, 1), {})});
  Save(dir + "early_and_retired", framed(1),
       {Framed(Write(50, 0, 0), Fill(100, 2)),
        Framed(Write(150, 0, 1), Fill(64, 3)),
        Framed(Write(1, 0, 2), Fill(8, 4))});
  Save(dir + "striped_out_of_order", framed(4),
       {Framed(Write(1, 4096 - 2048, 0, 2), Fill(2048, 5)),
        Framed(Write(1, 0, 1), Fill(4, 6)),
        Framed(Write(1, 0, 0, 2), Fill(2048, 7))});
  Save(dir + "out_of_range", framed(3),
       {Framed(Write(1, 4090, 0), Fill(16, 8))});
  Save(dir + "early_room_full", framed(5),
       {Framed(Write(60, 0, 0), Fill(3000, 9)),
        Framed(Write(61, 0, 1), Fill(3000, 10)),
        Framed(Write(1, 0, 2), Fill(1, 11))});
  Save(dir + "error_frame", framed(6),
       {Framed(Type(FrameType::kError, 9),
               Text("rank 1 (fuzz) refused: test"))});
  Save(dir + "control_too_big", framed(7),
       {Framed(Type(FrameType::kControl, 1), Fill(5000, 12))});
  Save(dir + "hello_after_handshake", framed(0), {Strip(Hello(1, 0, 0))});
  // Found by the fuzzer: parts of one write naming different regions made a
  // notice reach past its region (Inbox::NoteWritePart() now refuses them).
  Save(dir + "parts_disagree_on_region", framed(4),
       {Framed(Write(0x299, 8000, 0, 2), Fill(16, 14)),
        Framed(Write(1, 0, 0, 2), Fill(16, 15))});
  Save(dir + "raw_write_control", raw(2),
       {Frame(Write(1, 0, 0), Fill(32, 13)),
        Frame(Type(FrameType::kControl, 2), Text("x"))});
  Save(dir + "raw_garbage", raw(0),
       {Text("this is not a frame at all, not even close....")});
}

void HandshakeSeeds(const std::string& dir) {
  // Byte 0: bit 0 connecting, bit 1 secret, bit 2 loopback, bit 3 insecure,
  // bit 4 framed, bits 5-7 the read pattern. The harness is rank 1 of 4.
  constexpr uint8_t kAccept = 0, kConnect = 1, kSecret = 2, kLoopback = 4,
                    kInsecure = 8, kFramed = 16;
  using transport::AuthMode;
  Save(dir + "accept_no_secret", kAccept | kLoopback | (2 << 5),
       {Hello(2, 1, 1), Challenge(AuthMode::kNone, 1)});
  Save(dir + "accept_secret_bad_proof",
       kAccept | kSecret | kLoopback | (1 << 5),
       {Hello(3, 1, 0), Challenge(AuthMode::kHmacSha256, 2), ProofOf(0)});
  Save(dir + "accept_remote_refused", kAccept,
       {Hello(2, 1, 0), Challenge(AuthMode::kNone, 3)});
  Save(dir + "accept_remote_insecure", kAccept | kInsecure | (4 << 5),
       {Hello(2, 1, 0), Challenge(AuthMode::kNone, 3)});
  Save(dir + "accept_mode_mismatch", kAccept | kSecret | kLoopback,
       {Hello(2, 1, 0), Challenge(AuthMode::kNone, 4)});
  Save(dir + "accept_wrong_rank", kAccept | kLoopback, {Hello(0, 1, 0)});
  Save(dir + "connect_no_secret", kConnect | kLoopback | (3 << 5),
       {Hello(0, 1, 1), Challenge(AuthMode::kNone, 5),
        Frame(Type(FrameType::kWelcome), {})});
  Save(dir + "connect_secret_bad_proof", kConnect | kSecret | kLoopback,
       {Hello(0, 1, 1), Challenge(AuthMode::kHmacSha256, 6), ProofOf(0x42)});
  Save(dir + "connect_refused", kConnect | kLoopback,
       {Frame(Type(FrameType::kError, 9),
              Text("protocol version mismatch: rank 1 speaks version 4"))});
  Save(dir + "framed_accept", kAccept | kLoopback | kFramed,
       {Strip(Hello(2, 1, 1)), Strip(Challenge(AuthMode::kNone, 7))});
  Save(dir + "framed_connect",
       kConnect | kSecret | kLoopback | kFramed | (5 << 5),
       {Strip(Hello(0, 1, 1)), Strip(Challenge(AuthMode::kHmacSha256, 8)),
        Strip(ProofOf(1))});
}

}  // namespace
}  // namespace fuzz
}  // namespace starling

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus directory>\n");
    return 2;
  }
  const std::string root = argv[1];
  starling::fuzz::FrameSeeds(root + "/frame_fuzzer/");
  starling::fuzz::HandshakeSeeds(root + "/handshake_fuzzer/");
  return 0;
}
