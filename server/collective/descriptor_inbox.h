// DescriptorInbox: the op descriptors peers send this rank on one control
// tag (kOpDescriptorTag or kOpNoticeTag), whatever the op. Each peer sends its
// descriptors in op order and the transport delivers them in order per
// (peer, tag), so the queue from one peer is sorted by op: taking op `seq`'s
// drops those of earlier ops on the way (they came after their op had ended
// here: a peer that had waited long, or failed, tells every rank, and some
// had finished already) and sets aside those of later ops (the peer is
// ahead) for when this rank gets there. So a descriptor never outlives the
// next op that looks at its sender, and nothing depends on how many ops a
// tag can number.
//
// Owned by the Communicator, one per transport; thread-compatible (used by
// the thread running the current op).
#ifndef STARLING_SERVER_COLLECTIVE_DESCRIPTOR_INBOX_H_
#define STARLING_SERVER_COLLECTIVE_DESCRIPTOR_INBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/transport/transport.h"

namespace starling {
namespace collective {

// The control tags of collective op descriptors, whatever the op: the
// descriptors checked against each rank's call, and arrival notices (the
// same wire form; op_context.h), which only say that a rank is there.
// Collective tags have the top bit set, so other users of the transport can
// use tags below 2^31.
inline constexpr uint32_t kOpDescriptorTag = 0x80000000u;
inline constexpr uint32_t kOpNoticeTag = 0x80000001u;

class DescriptorInbox {
 public:
  DescriptorInbox(transport::Transport* transport, uint32_t tag);
  DescriptorInbox(const DescriptorInbox&) = delete;
  DescriptorInbox& operator=(const DescriptorInbox&) = delete;

  // `peer`'s descriptor of op `seq`, waiting for it until `deadline`
  // (InfinitePast: only a look at what is here). nullopt if it has not come
  // by then; the transport's error if the peer is lost. A message that is
  // not a descriptor counts as op `seq`'s (its receiver rejects it, naming
  // the sender).
  absl::StatusOr<std::optional<std::vector<std::byte>>> Take(
      int peer, uint64_t seq, absl::Time deadline);

  // Descriptors dropped because their op had ended here, since creation.
  uint64_t stale_dropped() const { return stale_dropped_; }
  // Descriptors set aside for later ops, now.
  size_t held_ahead() const;

 private:
  struct Ahead {
    uint64_t seq = 0;
    std::vector<std::byte> wire;
  };

  transport::Transport* const transport_;
  const uint32_t tag_;
  std::vector<std::deque<Ahead>> ahead_;  // per peer, in op order
  uint64_t stale_dropped_ = 0;
};

}  // namespace collective
}  // namespace starling

#endif  // STARLING_SERVER_COLLECTIVE_DESCRIPTOR_INBOX_H_
