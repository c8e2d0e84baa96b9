// MeteredTransport: the node daemon's data-plane transport with its traffic
// counted, whatever transport lies beneath (TCP today, RDMA or shared
// memory where they apply): it forwards every call to the transport it owns
// and counts, per peer rank,
//   starling_transport_sent_bytes_total{peer}      bytes of Write()s posted
//                                                  and control messages sent
//   starling_transport_received_bytes_total{peer}  bytes of writes consumed
//                                                  (WaitForWrite) and control
//                                                  messages received
// and the bytes registered with it now (registered_bytes()).
// Thread-safe, as the Transport interface requires.
#ifndef STARLING_SERVER_NODE_TELEMETRY_METERED_TRANSPORT_H_
#define STARLING_SERVER_NODE_TELEMETRY_METERED_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics/metrics_registry.h"
#include "server/transport/forwarding_transport.h"
#include "server/transport/transport.h"

namespace starling {
namespace node {

class MeteredTransport : public transport::ForwardingTransport {
 public:
  // The two counter families, owned by the registry they are in.
  struct Counters {
    metrics::CounterFamily* sent = nullptr;
    metrics::CounterFamily* received = nullptr;
  };
  // Registers the counter families in `registry`: once per process, for
  // every transport it makes (a daemon makes one per group epoch).
  // AlreadyExists if they are.
  static absl::StatusOr<Counters> Register(metrics::MetricsRegistry* registry);
  // Takes `inner` over and counts into `counters` (their registry must
  // outlive the transport).
  static std::unique_ptr<MeteredTransport> Create(
      std::unique_ptr<transport::Transport> inner, const Counters& counters);

  // Bytes registered now (RegisterRegion minus DeregisterRegion).
  uint64_t registered_bytes() const {
    return registered_bytes_.load(std::memory_order_relaxed);
  }

  absl::Status RegisterRegion(transport::RegionId id,
                              absl::Span<std::byte> memory) override;
  absl::Status DeregisterRegion(transport::RegionId id) override;
  void Write(int peer, absl::Span<const std::byte> data,
             transport::RegionId remote, uint64_t remote_offset_bytes,
             uint32_t imm, transport::Completion* done) override;
  absl::StatusOr<transport::WriteNotice> WaitForWrite(
      const transport::WriteMatch& match, absl::Time deadline) override;
  absl::Status SendControl(int peer, uint32_t tag,
                           absl::Span<const std::byte> message) override;
  // Counts both halves and keeps them together in the transport beneath.
  absl::Status SendControlThenWrite(int peer, uint32_t tag,
                                    absl::Span<const std::byte> message,
                                    absl::Span<const std::byte> data,
                                    transport::RegionId remote,
                                    uint64_t remote_offset_bytes, uint32_t imm,
                                    transport::Completion* done) override;
  absl::StatusOr<std::vector<std::byte>> RecvControl(
      int peer, uint32_t tag, absl::Time deadline) override;
  absl::StatusOr<std::optional<std::vector<std::byte>>> TryRecvControl(
      int peer, uint32_t tag) override;

 private:
  MeteredTransport(std::unique_ptr<transport::Transport> inner,
                   std::vector<metrics::Counter*> sent,
                   std::vector<metrics::Counter*> received);
  void CountSent(int peer, size_t bytes);
  void CountReceived(int peer, size_t bytes);

  const std::unique_ptr<transport::Transport> inner_;
  // By peer rank (this rank's entry null).
  const std::vector<metrics::Counter*> sent_;
  const std::vector<metrics::Counter*> received_;
  std::atomic<uint64_t> registered_bytes_{0};
  absl::Mutex regions_mu_;
  std::map<transport::RegionId, size_t> region_bytes_
      ABSL_GUARDED_BY(regions_mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_TELEMETRY_METERED_TRANSPORT_H_
