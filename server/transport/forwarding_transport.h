// ForwardingTransport: a Transport that passes every call to another one, for
// wrappers that change or watch a few calls (fault injection, metering, test
// recorders) and override only those. Does not own `base`: a wrapper that
// owns its transport keeps it in a member of its own, which outlives every
// call through this class.
// SendControlThenWrite() is not forwarded: Transport's default makes it the
// two calls, SendControl() then Write(), through this object, so that a
// wrapper sees (and may change) both halves.
// Thread-safe as far as `base` is.
#ifndef STARLING_SERVER_TRANSPORT_FORWARDING_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_FORWARDING_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

class ForwardingTransport : public Transport {
 public:
  // REQUIRES: `base` outlives this object.
  explicit ForwardingTransport(Transport* base) : base_(base) {}
  ForwardingTransport(const ForwardingTransport&) = delete;
  ForwardingTransport& operator=(const ForwardingTransport&) = delete;

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  std::string PeerName(int rank) const override {
    return base_->PeerName(rank);
  }
  absl::Status RegisterRegion(RegionId id,
                              absl::Span<std::byte> memory) override {
    return base_->RegisterRegion(id, memory);
  }
  absl::Status DeregisterRegion(RegionId id) override {
    return base_->DeregisterRegion(id);
  }
  void RetireRegions(RegionId first, RegionId end) override {
    base_->RetireRegions(first, end);
  }
  uint64_t stale_writes_dropped() const override {
    return base_->stale_writes_dropped();
  }
  void Write(int peer, absl::Span<const std::byte> data, RegionId remote,
             uint64_t remote_offset_bytes, uint32_t imm,
             Completion* done) override {
    base_->Write(peer, data, remote, remote_offset_bytes, imm, done);
  }
  absl::StatusOr<WriteNotice> WaitForWrite(const WriteMatch& match,
                                           absl::Time deadline) override {
    return base_->WaitForWrite(match, deadline);
  }
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override {
    return base_->SendControl(peer, tag, message);
  }
  absl::StatusOr<std::vector<std::byte>> RecvControl(
      int peer, uint32_t tag, absl::Time deadline) override {
    return base_->RecvControl(peer, tag, deadline);
  }
  absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag) override {
    return base_->TryRecvControl(peer, tag);
  }
  size_t max_control_bytes() const override {
    return base_->max_control_bytes();
  }
  absl::Status PeerStatus(int peer) const override {
    return base_->PeerStatus(peer);
  }
  void AbortPeer(int peer, const absl::Status& why) override {
    base_->AbortPeer(peer, why);
  }

 private:
  Transport* const base_;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FORWARDING_TRANSPORT_H_
