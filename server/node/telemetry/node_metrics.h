// NodeMetrics: the node daemon's Prometheus series (DESIGN.md
// "Observability"), registered once in the daemon's registry. The pointers
// are owned by the registry; the series are thread-safe.
#ifndef STARLING_SERVER_NODE_TELEMETRY_NODE_METRICS_H_
#define STARLING_SERVER_NODE_TELEMETRY_NODE_METRICS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/worker.pb.h"
#include "server/metrics/counter.h"
#include "server/metrics/gauge.h"
#include "server/metrics/histogram.h"
#include "server/metrics/metric_family.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace node {

// What the local workers report of their training (Client::ReportProgress,
// carried by their pushes): the samples are summed; the loss and accuracy
// gauges show the mean over the workers of each one's last report.
// Thread-safe.
class WorkerProgress {
 public:
  WorkerProgress(metrics::Counter* samples, metrics::Gauge* loss,
                 metrics::Gauge* accuracy)
      : samples_(samples), loss_(loss), accuracy_(accuracy) {}

  // One push from the local worker `worker_index`.
  void Record(int worker_index, const proto::PushGradientsRequest& push);

 private:
  metrics::Counter* const samples_;
  metrics::Gauge* const loss_;
  metrics::Gauge* const accuracy_;
  absl::Mutex mu_;
  std::map<int, double> last_loss_ ABSL_GUARDED_BY(mu_);
  std::map<int, double> last_accuracy_ ABSL_GUARDED_BY(mu_);
};

// starling_node_peer_transport{peer,transport}: 1 for each peer of the
// data plane the daemon serves, labelled with its rank and the transport
// the daemon's writes to it travel by ("tcp", "fabric (verbs;ofi_rxm)").
// A family keeps every series it ever had, so the series of an earlier
// plane (a re-formed group: other peers, or the same rank by another
// transport) drop to 0 rather than go. Thread-safe.
class PeerTransports {
 public:
  explicit PeerTransports(metrics::GaugeFamily* family) : family_(family) {}

  // The plane now served: `peer_transports` by rank ("" for this rank;
  // empty: no plane). Series of the plane before that are not in it go to
  // 0.
  void Set(const std::vector<std::string>& peer_transports);

 private:
  metrics::GaugeFamily* const family_;
  absl::Mutex mu_;
  // The series at 1.
  std::vector<metrics::Gauge*> current_ ABSL_GUARDED_BY(mu_);
};

struct NodeMetrics {
  // AlreadyExists if `registry` holds them already.
  static absl::StatusOr<NodeMetrics> Register(
      metrics::MetricsRegistry* registry);

  metrics::Histogram* step_seconds = nullptr;
  // Reduce-scatter + all-gather of a step, and plain all-reduces.
  metrics::Histogram* allreduce_seconds = nullptr;
  metrics::Counter* collective_bytes = nullptr;
  metrics::Counter* steps = nullptr;
  metrics::Counter* step_failures = nullptr;
  metrics::Counter* pushes = nullptr;
  metrics::Counter* pulls = nullptr;
  metrics::Histogram* push_seconds = nullptr;
  metrics::Histogram* pull_seconds = nullptr;
  // Staleness of each push: its step minus the version its worker last
  // pulled (updates the gradient's parameters missed; 0 in sync modes).
  metrics::Histogram* push_staleness = nullptr;
  // Workers' reports (client ReportStepTimes): forward/backward time, step
  // time, and the ratio of their sums over the run so far.
  metrics::Counter* worker_compute_seconds = nullptr;
  metrics::Counter* worker_step_seconds = nullptr;
  metrics::Gauge* compute_ratio = nullptr;
  metrics::Gauge* attached_workers = nullptr;
  // Local workers that left a running run without finishing (within their
  // grace), and the current run's id (0 between runs); set every heartbeat.
  metrics::Gauge* missing_workers = nullptr;
  metrics::Gauge* run_id = nullptr;
  // One-sided writes that arrived for an op that was gone (failed here, or
  // skipped by a new run) and were dropped; set every heartbeat.
  metrics::Counter* stale_writes_dropped = nullptr;
  metrics::Gauge* optimizer_state_bytes = nullptr;
  metrics::Gauge* shard_bytes = nullptr;
  metrics::Gauge* group_size = nullptr;
  // The group epoch of the data plane this daemon serves.
  metrics::Gauge* group_epoch = nullptr;
  // starling_node_copied_bytes_total{phase}: bytes of tensor data the
  // daemon's own code read or wrote in user space in sync modes (each byte
  // read and each byte written counts once, so a copy of n bytes counts
  // 2n; the collectives' transfers and reductions are not included).
  // phase="local_reduce": summing the local workers' gradients (and zeroing
  // what none pushed); "allreduce_staging": a worker all-reduce's sum into
  // the buffer the collective sends and the copies of the result back into
  // the workers' pools; "pull": copies of the parameters into the pools.
  metrics::Counter* local_reduce_copied_bytes = nullptr;
  metrics::Counter* allreduce_staging_copied_bytes = nullptr;
  metrics::Counter* pull_copied_bytes = nullptr;
  // This daemon's rank (-1 until it joined) and the link rate the operator
  // configured (--link_gbits, in bytes per second; 0: not configured).
  metrics::Gauge* rank = nullptr;
  metrics::Gauge* link_rate = nullptr;
  // Bytes registered with the data-plane transport now plus the local
  // workers' shared-memory pools mapped by the daemon; set every heartbeat.
  metrics::Gauge* registered_memory_bytes = nullptr;
  // Local workers that left a running run without finishing it.
  metrics::Counter* worker_failures = nullptr;
  // Data planes replaced because the coordinator re-formed the group.
  metrics::Counter* regroups = nullptr;
  // The buddy replica (sync/sync_run.h ShardReplica): the rank whose
  // master shard this daemon replicates (-1: none) and the replica's bytes
  // (master and optimizer state); the reduced-gradient bytes this daemon
  // handed its own buddy and the seconds those shifts took; the owner's
  // versions the replica is behind (0 after every step that replicated);
  // replica versions found unequal to what the owner all-gathered.
  metrics::Gauge* replica_of_rank = nullptr;
  metrics::Gauge* replica_bytes = nullptr;
  metrics::Counter* replicated_bytes = nullptr;
  metrics::Counter* replication_seconds = nullptr;
  metrics::Gauge* replica_lag_steps = nullptr;
  metrics::Counter* replica_mismatches = nullptr;
  // Runs continued in a re-formed group; updates rolled back then.
  metrics::Counter* run_continuations = nullptr;
  metrics::Counter* steps_rolled_back = nullptr;
  // Durable checkpoints (sync/checkpoint.h): files written and failed, their
  // bytes and seconds, the newest version written, the seconds steps waited
  // for the writer (the disk slower than the steps), and runs that went on
  // from a checkpoint (a shard with no replica left).
  metrics::Counter* checkpoints_written = nullptr;
  metrics::Counter* checkpoint_failures = nullptr;
  metrics::Counter* checkpoint_bytes = nullptr;
  metrics::Counter* checkpoint_seconds = nullptr;
  metrics::Gauge* checkpoint_version = nullptr;
  metrics::Counter* checkpoint_wait_seconds = nullptr;
  metrics::Counter* checkpoint_restores = nullptr;
  // Samples, loss and accuracy the local workers report.
  std::shared_ptr<WorkerProgress> progress;
  // Each peer's transport in the data plane served (set when a plane is
  // installed, cleared when it is replaced).
  std::shared_ptr<PeerTransports> peer_transports;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_TELEMETRY_NODE_METRICS_H_
