// FaultyTransport: a Transport that forwards to another one and injects
// faults on command, for tests of the layers above (collectives, daemon):
//
//   - DropWrites(peer, n): the next n writes to `peer` vanish; their
//     completions succeed, so only the receiver's wait notices (timeout).
//   - DelayWrites(peer, d): writes to `peer` are posted `d` later (on the
//     wrapper's timer thread; they may overtake or be overtaken by others).
//   - CorruptNextWrite(peer): the next write's target range is pushed far
//     past any region, as a corrupted frame length/offset would be: the
//     receiver takes its DataLoss path and the writer's completion fails.
//   - DropControl(peer, n): the next n control messages to `peer` vanish.
//   - ClosePeer(peer): the connection to `peer` is closed (AbortPeer with
//     Unavailable "fault injection closed the connection to rank R (...)").
//
// Thread-safe. Owns the wrapped transport. One timer thread, started with
// the wrapper; the destructor posts delayed writes at once and joins it.
#ifndef STARLING_SERVER_TRANSPORT_FAULT_INJECTION_FAULTY_TRANSPORT_H_
#define STARLING_SERVER_TRANSPORT_FAULT_INJECTION_FAULTY_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/transport/forwarding_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace transport {

class FaultyTransport : public ForwardingTransport {
 public:
  // REQUIRES: `base` is not null.
  explicit FaultyTransport(std::unique_ptr<Transport> base);
  FaultyTransport(const FaultyTransport&) = delete;
  FaultyTransport& operator=(const FaultyTransport&) = delete;
  ~FaultyTransport() override;

  // Fault controls; each applies to writes/messages posted after it.
  void DropWrites(int peer, int count);
  void DelayWrites(int peer, absl::Duration delay);
  void CorruptNextWrite(int peer);
  void DropControl(int peer, int count);
  void ClosePeer(int peer);

  Transport* base() const { return base_.get(); }

  void Write(int peer, absl::Span<const std::byte> data, RegionId remote,
             uint64_t remote_offset_bytes, uint32_t imm,
             Completion* done) override;
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override;

 private:
  struct PeerFaults {
    int drop_writes = 0;
    int drop_control = 0;
    bool corrupt_next = false;
    absl::Duration delay;
  };
  struct DelayedWrite {
    absl::Time due;
    int peer;
    absl::Span<const std::byte> data;
    RegionId remote;
    uint64_t offset;
    uint32_t imm;
    Completion* done;
  };

  void TimerLoop();
  void Post(const DelayedWrite& write);

  const std::unique_ptr<Transport> base_;

  absl::Mutex mu_;
  std::vector<PeerFaults> faults_ ABSL_GUARDED_BY(mu_);
  std::vector<DelayedWrite> delayed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;
};

}  // namespace transport
}  // namespace starling

#endif  // STARLING_SERVER_TRANSPORT_FAULT_INJECTION_FAULTY_TRANSPORT_H_
