#include "server/node/telemetry/collective_monitor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"
#include "server/collective/data_type.h"

namespace starling {
namespace node {

using collective::OpKind;

absl::StatusOr<std::shared_ptr<CollectiveMonitor>> CollectiveMonitor::Create(
    metrics::MetricsRegistry* registry) {
  std::shared_ptr<CollectiveMonitor> m(new CollectiveMonitor());
  const std::vector<std::string> labels = {"op", "algorithm", "size_bucket"};
  // 10 us to about 11 minutes: a small all-reduce on loopback to a
  // collective that waits out its timeout.
  STARLING_ASSIGN_OR_RETURN(
      m->duration_,
      registry->AddHistogram(
          "starling_collective_duration_seconds",
          "Duration of each collective on this daemon, start to end, by op, "
          "algorithm and payload size bucket",
          metrics::Histogram::ExponentialBounds(1e-5, 4, 14), labels));
  STARLING_ASSIGN_OR_RETURN(
      m->bytes_,
      registry->AddCounter("starling_collective_bytes_total",
                           "Payload bytes of the collectives that succeeded "
                           "(the caller's buffer)",
                           labels));
  STARLING_ASSIGN_OR_RETURN(
      m->bus_bytes_,
      registry->AddCounter(
          "starling_collective_bus_bytes_total",
          "Payload bytes times the nccl-tests bus factor (all-reduce "
          "2(n-1)/n): divided by the duration, the bus bandwidth to compare "
          "with the link rate",
          labels));
  STARLING_ASSIGN_OR_RETURN(
      m->failures_,
      registry->AddCounter("starling_collective_failures_total",
                           "Collectives that ended with an error", {"op"}));
  metrics::GaugeFamily* g;
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_collective_in_flight",
                            "Collectives running on this daemon now"));
  m->in_flight_ = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge(
             "starling_collective_oldest_in_flight_seconds",
             "Age of the oldest collective running on this daemon (0: none)"));
  m->oldest_in_flight_ = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_collective_missing_ranks",
                            "Ranks the running collectives have not heard "
                            "from yet (see starlingctl inflight)"));
  m->missing_ranks_ = g->Get();
  metrics::HistogramFamily* h;
  STARLING_ASSIGN_OR_RETURN(
      h, registry->AddHistogram(
             "starling_collective_arrival_skew_seconds",
             "How long this rank waited, after arriving at a collective, for "
             "the last rank to arrive (0 when this rank was last)",
             metrics::Histogram::ExponentialBounds(1e-5, 4, 14)));
  m->arrival_skew_ = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      m->last_arrivals_,
      registry->AddCounter("starling_collective_last_arrivals_total",
                           "Collectives in which `rank` arrived last (the "
                           "straggler), as this daemon saw them",
                           {"rank"}));
  registry->AddCollectHook([weak = std::weak_ptr<CollectiveMonitor>(m)] {
    if (std::shared_ptr<CollectiveMonitor> monitor = weak.lock()) {
      monitor->UpdateGauges();
    }
  });
  return m;
}

namespace {

// Size buckets: upper bounds 4 KiB, 64 KiB, 1 MiB, 16 MiB, 256 MiB, none.
constexpr const char* kSizeBuckets[] = {"0-4KiB",  "4-64KiB",   "64KiB-1MiB",
                                        "1-16MiB", "16-256MiB", "256MiB+"};

int SizeBucketIndex(uint64_t bytes) {
  uint64_t bound = 4 * 1024;
  int index = 0;
  while (index < 5 && bytes > bound) {
    bound *= 16;
    ++index;
  }
  return index;
}

}  // namespace

const char* CollectiveMonitor::SizeBucket(uint64_t bytes) {
  return kSizeBuckets[SizeBucketIndex(bytes)];
}

double CollectiveMonitor::BusFactor(OpKind kind, int size) {
  if (size < 2) return 0;
  const double n = size;
  switch (kind) {
    case OpKind::kAllReduce:
      return 2 * (n - 1) / n;
    case OpKind::kReduceScatter:
    case OpKind::kAllGather:
      return (n - 1) / n;
    case OpKind::kBroadcast:
      return 1;
    case OpKind::kBarrier:
      return 0;
    case OpKind::kShift:
      return 0.5;  // half the buffer leaves, half arrives
  }
  return 0;
}

void CollectiveMonitor::SetGroup(int rank, int size) {
  absl::MutexLock lock(&mu_);
  rank_ = rank;
  size_ = size;
  last_arrival_by_rank_.clear();
  for (int r = 0; r < size; ++r) {
    last_arrival_by_rank_.push_back(
        last_arrivals_->WithLabels({absl::StrCat(r)}));
  }
}

void CollectiveMonitor::OpStarted(const collective::OpDescriptor& desc,
                                  uint64_t bytes, absl::Time start) {
  absl::MutexLock lock(&mu_);
  Op& op = in_flight_ops_[desc.seq];
  op.desc = desc;
  op.bytes = bytes;
  op.start = start;
  op.arrived.assign(size_, false);
  if (rank_ >= 0 && rank_ < size_) op.arrived[rank_] = true;
}

void CollectiveMonitor::PeerArrived(uint64_t seq, int peer, absl::Time) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_ops_.find(seq);
  if (it == in_flight_ops_.end()) return;
  if (peer >= 0 && peer < static_cast<int>(it->second.arrived.size())) {
    it->second.arrived[peer] = true;
  }
}

CollectiveMonitor::Series* CollectiveMonitor::SeriesFor(
    const collective::OpDescriptor& desc, uint64_t bytes) {
  const int bucket = SizeBucketIndex(bytes);
  auto [it, added] = series_.try_emplace(
      {static_cast<int>(desc.kind), static_cast<int>(desc.algorithm), bucket});
  if (added) {
    const std::vector<std::string> values = {
        std::string(collective::OpKindName(desc.kind)),
        desc.algorithm == collective::Algorithm::kAuto
            ? std::string("none")
            : std::string(collective::AlgorithmName(desc.algorithm)),
        kSizeBuckets[bucket]};
    it->second.duration = duration_->WithLabels(values);
    it->second.bytes = bytes_->WithLabels(values);
    it->second.bus_bytes = bus_bytes_->WithLabels(values);
  }
  return &it->second;
}

void CollectiveMonitor::OpEnded(const collective::OpDescriptor& desc,
                                uint64_t bytes, const absl::Status& status,
                                absl::Duration duration,
                                const collective::ArrivalSummary& arrival) {
  absl::MutexLock lock(&mu_);
  Op op;
  if (auto it = in_flight_ops_.find(desc.seq); it != in_flight_ops_.end()) {
    op = std::move(it->second);
    in_flight_ops_.erase(it);
  } else {
    op.desc = desc;
    op.bytes = bytes;
    op.start = absl::Now() - duration;
  }
  op.duration = duration;
  op.error = status.ok() ? "" : std::string(status.message());
  // An op that succeeded had every rank, heard from here or not (ranks send
  // their descriptors to the peers they exchange data with).
  if (status.ok()) op.arrived.assign(size_, true);
  op.arrival = arrival;
  if (status.ok()) {
    Series* series = SeriesFor(desc, bytes);
    series->duration->Observe(absl::ToDoubleSeconds(duration));
    series->bytes->Increment(static_cast<double>(bytes));
    series->bus_bytes->Increment(static_cast<double>(bytes) *
                                 BusFactor(desc.kind, size_));
  } else {
    failures_->WithLabels({std::string(collective::OpKindName(desc.kind))})
        ->Increment();
  }
  if (arrival.last_rank >= 0 && arrival.last_rank < size_) {
    arrival_skew_->Observe(absl::ToDoubleSeconds(arrival.skew));
    last_arrival_by_rank_[arrival.last_rank]->Increment();
  }
  recent_.push_front(std::move(op));
  if (recent_.size() > kRecentOps) recent_.pop_back();
}

void CollectiveMonitor::UpdateGauges() {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  double oldest = 0;
  int missing = 0;
  for (const auto& [seq, op] : in_flight_ops_) {
    oldest = std::max(oldest, absl::ToDoubleSeconds(now - op.start));
    for (bool arrived : op.arrived) missing += arrived ? 0 : 1;
  }
  in_flight_->Set(static_cast<double>(in_flight_ops_.size()));
  oldest_in_flight_->Set(oldest);
  missing_ranks_->Set(missing);
}

proto::CollectiveOp CollectiveMonitor::ToProto(const Op& op, bool ended,
                                               absl::Time now) const {
  proto::CollectiveOp out;
  out.set_seq(op.desc.seq);
  out.set_op(std::string(collective::OpKindName(op.desc.kind)));
  out.set_dtype(std::string(collective::DataTypeName(op.desc.dtype)));
  out.set_count(op.desc.count);
  out.set_algorithm(std::string(collective::AlgorithmName(op.desc.algorithm)));
  out.set_bytes(op.bytes);
  out.set_fingerprint(op.desc.ToString());
  out.set_start_unix_micros(absl::ToUnixMicros(op.start));
  out.set_seconds(absl::ToDoubleSeconds(ended ? op.duration : now - op.start));
  for (int r = 0; r < static_cast<int>(op.arrived.size()); ++r) {
    if (op.arrived[r]) {
      out.add_arrived_ranks(r);
    } else {
      out.add_missing_ranks(r);
    }
  }
  if (ended) {
    out.set_error(op.error);
    out.set_last_rank(op.arrival.last_rank);
    out.set_skew_seconds(absl::ToDoubleSeconds(op.arrival.skew));
  } else {
    out.set_last_rank(-1);
  }
  return out;
}

proto::CollectivesReply CollectiveMonitor::Snapshot(absl::Time now) const {
  absl::ReaderMutexLock lock(&mu_);
  proto::CollectivesReply reply;
  reply.set_rank(rank_);
  reply.set_group_size(size_);
  reply.set_now_unix_micros(absl::ToUnixMicros(now));
  for (const auto& [seq, op] : in_flight_ops_) {
    *reply.add_in_flight() = ToProto(op, /*ended=*/false, now);
  }
  for (const Op& op : recent_) {
    *reply.add_recent() = ToProto(op, /*ended=*/true, now);
  }
  return reply;
}

}  // namespace node
}  // namespace starling
