// CollectiveMonitor: the node daemon's view of its collectives, fed by its
// Communicator (CollectiveObserver). It exports the collective metrics and
// answers "who is missing" for the admin service (GetCollectives): which ops
// are in flight, since when, and which ranks this daemon has not heard from.
//
// Metrics (all by this daemon; labels are bounded: op kind, algorithm, a
// size bucket, a rank):
//   starling_collective_duration_seconds{op,algorithm,size_bucket}  histogram
//   starling_collective_bytes_total{op,algorithm,size_bucket}        payload
//   starling_collective_bus_bytes_total{op,algorithm,size_bucket}    payload
//       times nccl-tests' bus factor (all-reduce 2(n-1)/n, reduce-scatter
//       and all-gather (n-1)/n, broadcast 1), so that rate(bus_bytes) /
//       rate(duration_seconds_sum) is the bus bandwidth to hold against the
//       link rate
//   starling_collective_failures_total{op}
//   starling_collective_in_flight, _oldest_in_flight_seconds, _missing_ranks
//       (gauges, brought up to date at every scrape)
//   starling_collective_arrival_skew_seconds  histogram: how long this rank
//       waited after its own arrival for the last rank's
//   starling_collective_last_arrivals_total{rank}  ops in which `rank`
//       arrived last (the straggler), as this daemon saw it
//
// Thread-safe: the op thread reports, scrapes and admin RPCs read.
#ifndef STARLING_SERVER_NODE_TELEMETRY_COLLECTIVE_MONITOR_H_
#define STARLING_SERVER_NODE_TELEMETRY_COLLECTIVE_MONITOR_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/node_admin.pb.h"
#include "server/collective/collective_observer.h"
#include "server/collective/op_descriptor.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace node {

class CollectiveMonitor : public collective::CollectiveObserver {
 public:
  // Ended ops kept for GetCollectives.
  static constexpr int kRecentOps = 8;

  // Registers the metrics and a collect hook in `registry` (borrowed; the
  // hook does nothing once the monitor is gone). AlreadyExists if they are
  // registered already.
  static absl::StatusOr<std::shared_ptr<CollectiveMonitor>> Create(
      metrics::MetricsRegistry* registry);

  // This daemon's rank and the group size, once joined (before: -1, 0).
  void SetGroup(int rank, int size);

  // CollectiveObserver (the op thread).
  void OpStarted(const collective::OpDescriptor& desc, uint64_t bytes,
                 absl::Time start) override;
  void PeerArrived(uint64_t seq, int peer, absl::Time when) override;
  void OpEnded(const collective::OpDescriptor& desc, uint64_t bytes,
               const absl::Status& status, absl::Duration duration,
               const collective::ArrivalSummary& arrival) override;

  // What runs now and what ended last, as of `now`.
  proto::CollectivesReply Snapshot(absl::Time now) const;

  // "0-4KiB", "4-64KiB", "64KiB-1MiB", "1-16MiB", "16-256MiB", "256MiB+".
  static const char* SizeBucket(uint64_t bytes);
  // nccl-tests' bus bandwidth factor of `kind` in a group of `size`.
  static double BusFactor(collective::OpKind kind, int size);

 private:
  struct Op {
    collective::OpDescriptor desc;
    uint64_t bytes = 0;
    absl::Time start;
    std::vector<bool> arrived;  // by rank; empty until the group is known
    // Ended ops.
    absl::Duration duration;
    std::string error;
    collective::ArrivalSummary arrival;
  };
  // The per-label series of one (op, algorithm, size bucket).
  struct Series {
    metrics::Histogram* duration = nullptr;
    metrics::Counter* bytes = nullptr;
    metrics::Counter* bus_bytes = nullptr;
  };

  CollectiveMonitor() = default;
  void UpdateGauges();
  proto::CollectiveOp ToProto(const Op& op, bool ended, absl::Time now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  Series* SeriesFor(const collective::OpDescriptor& desc, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  metrics::HistogramFamily* duration_ = nullptr;
  metrics::CounterFamily* bytes_ = nullptr;
  metrics::CounterFamily* bus_bytes_ = nullptr;
  metrics::CounterFamily* failures_ = nullptr;
  metrics::Gauge* in_flight_ = nullptr;
  metrics::Gauge* oldest_in_flight_ = nullptr;
  metrics::Gauge* missing_ranks_ = nullptr;
  metrics::Histogram* arrival_skew_ = nullptr;
  metrics::CounterFamily* last_arrivals_ = nullptr;

  mutable absl::Mutex mu_;
  int rank_ ABSL_GUARDED_BY(mu_) = -1;
  int size_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Op> in_flight_ops_ ABSL_GUARDED_BY(mu_);
  std::deque<Op> recent_ ABSL_GUARDED_BY(mu_);  // newest first
  // By (op kind, algorithm, size bucket index), created on first use.
  std::map<std::tuple<int, int, int>, Series> series_ ABSL_GUARDED_BY(mu_);
  // starling_collective_last_arrivals_total by rank (SetGroup).
  std::vector<metrics::Counter*> last_arrival_by_rank_ ABSL_GUARDED_BY(mu_);
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_TELEMETRY_COLLECTIVE_MONITOR_H_
