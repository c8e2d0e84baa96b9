// The parameter-server wire (ps_wire_format.md): control tags, request
// kinds, reply stages, header layouts and region ids, for PsEngine
// (ps_engine.cc, ps_turns.cc). Private to //server/node/ps. Constants and
// pure functions; thread-safe.
#ifndef STARLING_SERVER_NODE_PS_PS_WIRE_H_
#define STARLING_SERVER_NODE_PS_PS_WIRE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

// Control tags: requests to an owner; replies to a requester's worker
// (kPsReplyTagBase + its local index).
inline constexpr uint32_t kPsRequestTag = 2;
inline constexpr uint32_t kPsReplyTagBase = 1024;
// Replicated updates, owner -> buddy; their answers come on
// kPsReplicaReplyTagBase + the owner's thread (ps_wire_format.md).
inline constexpr uint32_t kPsReplicaTag = 4;
inline constexpr uint32_t kPsReplicaReplyTagBase = uint32_t{1} << 20;

// A request's header, laid out as on the wire (ps_wire_format.md; 48
// bytes, no padding).
struct PsRequest {
  uint32_t kind = 0;  // 1 push, 2 pull, 3 updates, 4 replicate
  uint32_t reply_tag = 0;
  uint64_t request_id = 0;
  uint64_t run_id = 0;
  transport::RegionId region = 0;
  uint64_t offset_bytes = 0;
  uint64_t part_bytes = 0;
};

constexpr uint32_t kPush = 1;
constexpr uint32_t kPull = 2;
constexpr uint32_t kUpdates = 3;
constexpr uint32_t kReplicate = 4;
// Reply stages.
constexpr uint32_t kReady = 1;
constexpr uint32_t kDone = 2;
constexpr size_t kRequestBytes = 48;
constexpr size_t kReplyHeaderBytes = 24;
// Waits are cut into slices this long so that Stop() is noticed.
constexpr absl::Duration kWaitSlice = absl::Milliseconds(200);

// Region ids (ps_wire_format.md): bits 63..61 are 010 for a push's
// receive buffer on the owner, 011 for a pull's on the requester.
constexpr uint64_t kPsRegionBit = uint64_t{1} << 62;
constexpr uint64_t kPullRegionBit = uint64_t{1} << 61;
constexpr int kWriterShift = 40;
constexpr uint64_t kPushCountMask = (uint64_t{1} << kWriterShift) - 1;
constexpr uint64_t kPullCountMask = kPullRegionBit - 1;

inline transport::RegionId PushRegionId(int writer, uint64_t count) {
  return kPsRegionBit | (static_cast<uint64_t>(writer) << kWriterShift) |
         (count & kPushCountMask);
}

// The writer rank a push region id names, or -1 if `id` is not one.
inline int PushRegionWriter(transport::RegionId id) {
  if ((id >> 61) != 2) return -1;
  return static_cast<int>((id & kPullCountMask) >> kWriterShift);
}

inline transport::RegionId PullRegionId(uint64_t count) {
  return kPsRegionBit | kPullRegionBit | (count & kPullCountMask);
}

inline bool IsPullRegionId(transport::RegionId id) { return (id >> 61) == 3; }

// Both headers are laid out as on the wire (fixed-width fields, no
// padding) and copied whole: host order, the group is one architecture.
static_assert(sizeof(PsRequest) == kRequestBytes, "request header layout");
struct ReplyHeader {
  uint32_t code = 0;  // absl::StatusCode
  uint32_t message_bytes = 0;
  uint64_t request_id = 0;
  uint32_t stage = 0;
  uint32_t zero = 0;
};
static_assert(sizeof(ReplyHeader) == kReplyHeaderBytes, "reply layout");

// The request header of `message`; if it is too short, as much of it as
// there is (kind, reply tag and request id, for an error reply) and
// DataLoss.
inline absl::Status DecodeRequest(absl::Span<const std::byte> message,
                                  PsRequest* request) {
  if (message.size() >= kRequestBytes) {
    std::memcpy(request, message.data(), kRequestBytes);
    return absl::OkStatus();
  }
  std::memcpy(request, message.data(),
              std::min(message.size(), offsetof(PsRequest, run_id)));
  return absl::DataLossError(
      absl::StrCat("parameter-server request of ", message.size(),
                   " bytes; version 2 requests have at least ", kRequestBytes));
}

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_PS_PS_WIRE_H_
