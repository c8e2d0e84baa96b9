// Writes the seed corpora of the fuzz harnesses (corpus/<harness>/), so that
// they can be regenerated when the wire format changes (a version bump makes
// every seed's HELLO stale):
//
//   bazel run //tests/fuzz:make_seeds -- "$PWD/tests/fuzz/corpus"
//
// Each seed is one byte choosing the harness's setting (see the harness's
// comment) followed by frames: whole ones, or in the "framed" form the
// harness completes (44 header bytes without the checksum, then payload).
// The worker-request seeds are worker socket streams (a 4-byte length, then
// a serialized proto::WorkerRequest) or, with bit 0 of the setting, one
// request's bytes alone. The fabric HELLO seeds are one fabric HELLO or one
// fabric slot header (with bit 0 of the setting, its checksum left for the
// harness to fill in).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/node/worker/worker_request_check.h"
#include "server/transport/auth.h"
#include "server/transport/fabric/fabric_wire.h"
#include "server/transport/frame.h"
#include "server/transport/handshake.h"

namespace starling {
namespace fuzz {
namespace {

using Bytes = std::vector<uint8_t>;
using transport::FrameHeader;
using transport::FrameType;
using transport::fabric::FabricHello;

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
  FrameHeader header =
      transport::WriteFrameHeader(region, offset, /*length=*/0, imm, seq);
  header.part_count = parts;
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

Bytes Of(const std::vector<std::byte>& bytes) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  return Bytes(p, p + bytes.size());
}

// A usable fabric HELLO, as rank 3 of 5 on verbs sends it.
FabricHello UsableFabricHello() {
  FabricHello hello;
  hello.usable = true;
  hello.rank = 3;
  hello.size = 5;
  hello.slot_bytes = uint32_t{512} << 10;
  hello.slots = 8;
  hello.recv_base = 0x7f0012345000;
  hello.recv_key = 0x1122334455667788;
  hello.credit_base = 0x7f0000001000;
  hello.credit_key = 42;
  hello.provider = "verbs;ofi_rxm";
  hello.host = "node7/8a1f0c2e-5d4b-4f43-9a7e-0f1e2d3c4b5a/net:[4026531840]";
  hello.text = std::string("\x02\x00\x75\x30\x7f\x00\x00\x01", 8);
  return hello;
}

Bytes EncodedHello(const FabricHello& hello) {
  return Of(transport::fabric::EncodeFabricHello(hello));
}

// The slot header of one WRITE part; `strip` leaves its checksum (the 4
// bytes after the first 48) zero, for the harness to fill in.
Bytes SlotHeader(uint32_t seq, uint32_t parts, uint64_t region, uint64_t offset,
                 uint64_t length, bool strip = false) {
  FrameHeader header = Write(region, offset, seq, 1, seq * 3);
  header.part_count = parts;
  header.length = length;
  std::vector<std::byte> slot(transport::fabric::kSlotHeaderBytes);
  transport::fabric::EncodeSlotHeader(header, slot.data());
  Bytes bytes = Of(slot);
  if (strip) std::fill(bytes.begin() + 48, bytes.begin() + 52, 0);
  return bytes;
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

// One worker socket frame: the 4-byte little-endian length, the request.
Bytes WorkerFrame(const proto::WorkerRequest& request) {
  const std::string payload = request.SerializeAsString();
  const uint32_t length = static_cast<uint32_t>(payload.size());
  Bytes bytes = {
      static_cast<uint8_t>(length), static_cast<uint8_t>(length >> 8),
      static_cast<uint8_t>(length >> 16), static_cast<uint8_t>(length >> 24)};
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

Bytes Payload(const proto::WorkerRequest& request) {
  return Text(request.SerializeAsString());
}

proto::WorkerRequest HelloRequest(uint64_t pool_bytes) {
  proto::WorkerRequest request;
  request.set_id(0);
  proto::HelloRequest* hello = request.mutable_hello();
  hello->set_worker_name("trainer-0");
  hello->set_worker_index(0);
  hello->set_pool_bytes(pool_bytes);
  hello->set_version("starling-fuzz");
  return request;
}

proto::WorkerRequest DeclareRequest(uint64_t id, const std::string& name,
                                    std::initializer_list<int64_t> shape,
                                    proto::DataType dtype) {
  proto::WorkerRequest request;
  request.set_id(id);
  proto::TensorSpec* spec = request.mutable_declare_tensor()->mutable_spec();
  spec->set_name(name);
  for (int64_t d : shape) spec->add_shape(d);
  spec->set_dtype(dtype);
  return request;
}

void AddSlice(proto::PoolSlice* slice, const std::string& tensor,
              uint64_t offset_bytes, uint64_t elements) {
  slice->set_tensor(tensor);
  slice->set_offset_bytes(offset_bytes);
  slice->set_elements(elements);
}

proto::WorkerRequest PushRequest(uint64_t id, int64_t step) {
  proto::WorkerRequest request;
  request.set_id(id);
  proto::PushGradientsRequest* push = request.mutable_push_gradients();
  push->set_step(step);
  AddSlice(push->add_slices(), "layer1.weight", 0, 200704);
  AddSlice(push->add_slices(), "layer1.bias", 802816, 256);
  return request;
}

proto::WorkerRequest PullRequest(uint64_t id, int64_t version) {
  proto::WorkerRequest request;
  request.set_id(id);
  proto::PullParametersRequest* pull = request.mutable_pull_parameters();
  pull->set_version(version);
  AddSlice(pull->add_slices(), "layer1.weight", 0, 200704);
  AddSlice(pull->add_slices(), "layer1.bias", 802816, 256);
  return request;
}

proto::WorkerRequest CollectiveRequest(uint64_t id, uint64_t offset_bytes,
                                       uint64_t elements) {
  proto::WorkerRequest request;
  request.set_id(id);
  proto::CollectiveRequest* collective = request.mutable_collective();
  collective->set_kind(proto::CollectiveRequest::KIND_ALL_REDUCE);
  collective->set_dtype(proto::DATA_TYPE_FLOAT32);
  collective->set_op(proto::REDUCE_OP_SUM);
  AddSlice(collective->mutable_slice(), "", offset_bytes, elements);
  return request;
}

proto::WorkerRequest Empty(uint64_t id, int kind) {
  proto::WorkerRequest request;
  request.set_id(id);
  switch (kind) {
    case proto::WorkerRequest::kCommitTensors:
      request.mutable_commit_tensors();
      break;
    case proto::WorkerRequest::kBarrier:
      request.mutable_barrier();
      break;
    case proto::WorkerRequest::kFinish:
      request.mutable_finish();
      break;
  }
  return request;
}

void WorkerRequestSeeds(const std::string& dir) {
  // Byte 0: bit 0 set, the rest is one payload; clear, a socket stream.
  constexpr uint8_t kStream = 0, kPayload = 1;
  constexpr uint64_t kPool = uint64_t{64} << 20;
  using proto::WorkerRequest;
  // Valid requests, in the order a worker sends them.
  Save(dir + "hello_declare_commit", kStream,
       {WorkerFrame(HelloRequest(kPool)),
        WorkerFrame(DeclareRequest(1, "layer1.weight", {256, 784},
                                   proto::DATA_TYPE_FLOAT32)),
        WorkerFrame(
            DeclareRequest(2, "layer1.bias", {256}, proto::DATA_TYPE_FLOAT32)),
        WorkerFrame(DeclareRequest(3, "scalar", {}, proto::DATA_TYPE_INT64)),
        WorkerFrame(Empty(4, WorkerRequest::kCommitTensors))});
  Save(dir + "push_pull", kStream,
       {WorkerFrame(PushRequest(5, 0)), WorkerFrame(PullRequest(6, 1)),
        WorkerFrame(PushRequest(7, 1)), WorkerFrame(PullRequest(8, 2))});
  Save(dir + "allreduce_barrier_finish", kStream,
       {WorkerFrame(CollectiveRequest(9, 4096, 1024)),
        WorkerFrame(Empty(10, WorkerRequest::kBarrier)),
        WorkerFrame(Empty(11, WorkerRequest::kFinish))});
  Save(dir + "declare_payload", kPayload,
       {Payload(DeclareRequest(12, "embedding", {0, 4096, 16},
                               proto::DATA_TYPE_BFLOAT16))});
  Save(dir + "push_payload", kPayload, {Payload(PushRequest(13, 42))});
  Save(dir + "hello_payload", kPayload, {Payload(HelloRequest(4096))});
  // At the bounds: the largest slice a pool can hold, and one that ends
  // exactly at the end of the largest pool.
  Save(dir + "largest_slice", kPayload,
       {Payload(CollectiveRequest(23, 0, node::kMaxElements))});
  Save(dir + "slice_at_pool_end", kStream,
       {WorkerFrame(CollectiveRequest(24, node::kMaxPoolBytes - 4096, 1024))});
  // Found by the fuzzer: a slice starting inside the largest pool but ending
  // past it was accepted (CheckSlice() bounded the offset and the length,
  // not their sum).
  Save(dir + "slice_past_pool_end", kStream,
       {WorkerFrame(CollectiveRequest(24, node::kMaxPoolBytes - 4096, 8320))});
  // Malformed.
  Save(dir + "frame_too_long", kStream,
       {Bytes{0x01, 0x00, 0x00, 0x01}, Payload(Empty(14, 0))});
  Save(dir + "frame_cut_short", kStream,
       {Bytes{0x00, 0x10, 0x00, 0x00}, Payload(PushRequest(15, 3))});
  Save(dir + "undecodable", kStream,
       {Bytes{0x05, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f},
        WorkerFrame(Empty(16, WorkerRequest::kBarrier))});
  Save(dir + "shape_overflows", kPayload,
       {Payload(DeclareRequest(17, "x", {int64_t{1} << 32, int64_t{1} << 32},
                               proto::DATA_TYPE_FLOAT32))});
  Save(dir + "negative_dimension", kStream,
       {WorkerFrame(
           DeclareRequest(18, "x", {4, -1}, proto::DATA_TYPE_FLOAT32))});
  Save(dir + "unknown_dtype", kPayload,
       {Payload(
           DeclareRequest(19, "x", {3}, static_cast<proto::DataType>(99)))});
  Save(dir + "name_with_newline", kPayload,
       {Payload(DeclareRequest(20, "a\nb", {1}, proto::DATA_TYPE_FLOAT32))});
  Save(dir + "id_zero_push", kStream, {WorkerFrame(PushRequest(0, 1))});
  Save(dir + "negative_step", kStream, {WorkerFrame(PushRequest(21, -3))});
  Save(dir + "hello_without_pool", kStream, {WorkerFrame(HelloRequest(0))});
  Save(dir + "no_kind", kPayload, {Payload(Empty(22, 0))});
}

void FabricHelloSeeds(const std::string& dir) {
  // Byte 0: bit 0 the harness fills in the slot header's checksum, bits 1-7
  // (k) the slot's size: 65 bytes for 0, UINT32_MAX for 127, else k * 8 KiB.
  constexpr uint8_t kFillChecksum = 1;
  auto slot = [](int k) { return static_cast<uint8_t>(k << 1); };
  constexpr uint64_t kDefaultPayload = (uint64_t{512} << 10) - 64;
  // HELLOs: usable (verbs, shm), unusable with its reason, every field at
  // its bound, and a usable one without slots (refused).
  Save(dir + "usable_hello", slot(64), {EncodedHello(UsableFabricHello())});
  FabricHello unusable;
  unusable.rank = 1;
  unusable.size = 2;
  unusable.host = "node2/0d9c2e4f-1a2b-4c3d-8e9f-a0b1c2d3e4f5/net:[4026531840]";
  unusable.text = "no provider 'verbs': fi_getinfo: No data available (-61)";
  Save(dir + "unusable_hello", slot(64), {EncodedHello(unusable)});
  FabricHello shm = UsableFabricHello();
  shm.provider = "shm";
  shm.text = "fi_shm_3_0_7";
  Save(dir + "usable_shm_hello", slot(1), {EncodedHello(shm)});
  FabricHello bounds = UsableFabricHello();
  bounds.slots = 65535;
  bounds.slot_bytes = 65;
  bounds.provider = std::string(transport::fabric::kMaxProviderBytes, 'p');
  bounds.host = std::string(transport::fabric::kMaxHostBytes, 'h');
  bounds.text = std::string(transport::fabric::kMaxTextBytes, 't');
  Save(dir + "hello_at_bounds", slot(0), {EncodedHello(bounds)});
  FabricHello no_slots = UsableFabricHello();
  no_slots.slots = 0;
  Save(dir + "usable_hello_without_slots", slot(64), {EncodedHello(no_slots)});
  // Slot headers: one part of a striped write, a payload filling its slot
  // exactly and one byte past it.
  Save(dir + "slot_header", slot(64), {SlotHeader(7, 2, 1, 4096, 65536)});
  Save(dir + "slot_header_fills_slot", slot(64),
       {SlotHeader(8, 1, 1, 0, kDefaultPayload)});
  Save(dir + "slot_header_past_slot", slot(64),
       {SlotHeader(9, 1, 1, 0, kDefaultPayload + 1)});
  // With the checksum filled in by the harness: the largest slot, and the
  // checks behind the checksum (part count 0, reserved word set).
  Save(dir + "slot_header_fills_largest_slot", slot(127) | kFillChecksum,
       {SlotHeader(10, 1000, 0x299, uint64_t{1} << 40, UINT32_MAX - 64, true)});
  Save(dir + "slot_header_no_parts", slot(1) | kFillChecksum,
       {SlotHeader(11, 0, 1, 0, 100, true)});
  Bytes reserved = SlotHeader(12, 1, 1, 0, 1, true);
  reserved[40] = 1;
  Save(dir + "slot_header_reserved_set", slot(0) | kFillChecksum, {reserved});
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
  starling::fuzz::WorkerRequestSeeds(root + "/worker_request_fuzzer/");
  starling::fuzz::FabricHelloSeeds(root + "/fabric_hello_fuzzer/");
  return 0;
}
