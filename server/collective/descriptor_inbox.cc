#include "server/collective/descriptor_inbox.h"

#include <utility>

#include "absl/status/status.h"
#include "server/collective/op_descriptor.h"

namespace starling {
namespace collective {

DescriptorInbox::DescriptorInbox(transport::Transport* transport, uint32_t tag)
    : transport_(transport), tag_(tag), ahead_(transport->size()) {}

size_t DescriptorInbox::held_ahead() const {
  size_t held = 0;
  for (const std::deque<Ahead>& queue : ahead_) held += queue.size();
  return held;
}

absl::StatusOr<std::optional<std::vector<std::byte>>> DescriptorInbox::Take(
    int peer, uint64_t seq, absl::Time deadline) {
  std::deque<Ahead>& ahead = ahead_[peer];
  while (!ahead.empty() && ahead.front().seq < seq) {
    ahead.pop_front();  // an op this rank skipped or left
    ++stale_dropped_;
  }
  if (!ahead.empty() && ahead.front().seq == seq) {
    std::vector<std::byte> wire = std::move(ahead.front().wire);
    ahead.pop_front();
    return std::optional<std::vector<std::byte>>(std::move(wire));
  }
  // Whatever is set aside is of a later op; the queue may still hold this
  // op's only if nothing is (the peer sends in op order), but a peer that
  // skipped this op is told by the deadline, as one that never came.
  while (true) {
    absl::StatusOr<std::optional<std::vector<std::byte>>> wire;
    if (deadline == absl::InfinitePast()) {
      wire = transport_->TryRecvControl(peer, tag_);
    } else {
      absl::StatusOr<std::vector<std::byte>> got =
          transport_->RecvControl(peer, tag_, deadline);
      if (got.ok()) {
        wire = std::optional<std::vector<std::byte>>(*std::move(got));
      } else if (absl::IsDeadlineExceeded(got.status())) {
        wire = std::optional<std::vector<std::byte>>();
      } else {
        wire = got.status();
      }
    }
    if (!wire.ok() || !wire->has_value()) return wire;
    const std::optional<uint64_t> their_seq = OpDescriptor::PeekSeq(**wire);
    if (!their_seq.has_value() || *their_seq == seq) return wire;
    if (*their_seq < seq) {
      ++stale_dropped_;
      continue;
    }
    ahead.push_back(Ahead{*their_seq, **std::move(wire)});
  }
}

}  // namespace collective
}  // namespace starling
