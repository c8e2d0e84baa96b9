#include "server/node/telemetry/node_metrics.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"

namespace starling {
namespace node {

absl::StatusOr<NodeMetrics> NodeMetrics::Register(
    metrics::MetricsRegistry* registry) {
  const std::vector<double> seconds =
      metrics::Histogram::ExponentialBounds(1e-5, 4, 12);
  NodeMetrics m;
  metrics::HistogramFamily* h;
  metrics::CounterFamily* c;
  metrics::GaugeFamily* g;
  STARLING_ASSIGN_OR_RETURN(
      h,
      registry->AddHistogram("starling_node_step_seconds",
                             "Time of one synchronous step on this daemon, "
                             "from the last local push to the new parameters",
                             seconds));
  m.step_seconds = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      h, registry->AddHistogram(
             "starling_node_allreduce_seconds",
             "Time of the inter-daemon collectives of a step (reduce-scatter "
             "plus all-gather) or of one worker all-reduce",
             seconds));
  m.allreduce_seconds = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_collective_bytes_total",
                              "Bytes handed to inter-daemon collectives"));
  m.collective_bytes = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_steps_total",
                              "Synchronous steps completed"));
  m.steps = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_step_failures_total",
                              "Steps or collectives that failed"));
  m.step_failures = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_pushes_total",
                              "Gradient pushes answered to local workers"));
  m.pushes = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_pulls_total",
                              "Parameter pulls answered to local workers"));
  m.pulls = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      h, registry->AddHistogram("starling_node_push_seconds",
                                "Latency of a gradient push, request to answer",
                                seconds));
  m.push_seconds = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      h, registry->AddHistogram(
             "starling_node_pull_seconds",
             "Latency of a parameter pull, request to answer", seconds));
  m.pull_seconds = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      h, registry->AddHistogram(
             "starling_node_push_staleness",
             "Staleness of each gradient push: its step minus the parameter "
             "version its worker last pulled (0 in synchronous SGD; at most "
             "the run's bound in async SGD)",
             {0, 1, 2, 3, 4, 6, 8, 12, 16, 32}));
  m.push_staleness = h->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter(
             "starling_node_worker_compute_seconds_total",
             "Seconds local workers spent in forward and backward (as they "
             "report them)"));
  m.worker_compute_seconds = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_worker_step_seconds_total",
                              "Seconds of local workers' whole steps (as they "
                              "report them)"));
  m.worker_step_seconds = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_compute_ratio",
                            "Local workers' compute time / step time over "
                            "the running run (1: communication fully hidden)"));
  m.compute_ratio = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_attached_workers",
                            "Local workers attached to this daemon"));
  m.attached_workers = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_missing_workers",
                            "Local workers that left the running run without "
                            "finishing and have not been replaced yet"));
  m.missing_workers = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_run_id",
                            "The training run this daemon runs (0 between "
                            "runs)"));
  m.run_id = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter(
             "starling_node_stale_writes_dropped_total",
             "Data-plane writes that arrived for an operation that was gone "
             "(failed here, or skipped by a new run) and were dropped"));
  m.stale_writes_dropped = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      g,
      registry->AddGauge("starling_node_optimizer_state_bytes",
                         "Bytes of optimizer state for this daemon's shard"));
  m.optimizer_state_bytes = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_shard_bytes",
                            "Bytes of the parameter shard this daemon owns"));
  m.shard_bytes = g->Get();
  STARLING_ASSIGN_OR_RETURN(g, registry->AddGauge("starling_node_group_size",
                                                  "Daemons in the group"));
  m.group_size = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_group_epoch",
                            "Group epoch of the data plane this daemon "
                            "serves (a new one each time the group "
                            "re-forms)"));
  m.group_epoch = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter(
             "starling_node_copied_bytes_total",
             "Bytes of tensor data the daemon read or wrote in user space "
             "(sync modes; a copy of n bytes counts 2n), by phase",
             {"phase"}));
  m.local_reduce_copied_bytes = c->WithLabels({"local_reduce"});
  m.allreduce_staging_copied_bytes = c->WithLabels({"allreduce_staging"});
  m.pull_copied_bytes = c->WithLabels({"pull"});
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_rank",
                            "This daemon's rank in its group (-1 before it "
                            "joined)"));
  m.rank = g->Get();
  m.rank->Set(-1);
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge(
             "starling_node_link_rate_bytes_per_second",
             "The network link rate the operator configured for this node "
             "(--link_gbits), to hold bus bandwidth against; 0: not set"));
  m.link_rate = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge(
             "starling_node_registered_memory_bytes",
             "Memory registered with the data-plane transport now plus the "
             "local workers' shared-memory pools the daemon maps"));
  m.registered_memory_bytes = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter(
             "starling_node_worker_failures_total",
             "Local workers that left a running run without finishing it "
             "(crashed, killed, disconnected)"));
  m.worker_failures = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter(
             "starling_node_regroups_total",
             "Times this daemon replaced its data plane because the "
             "coordinator re-formed the group (a member lost, a node taken "
             "in): the run in progress then ended"));
  m.regroups = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_replica_of_rank",
                            "Rank whose master shard and optimizer state this "
                            "daemon keeps a replica of (-1: none)"));
  m.replica_of_rank = g->Get();
  m.replica_of_rank->Set(-1);
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_replica_bytes",
                            "Bytes of the replica this daemon keeps (master "
                            "parameters and optimizer state of its owner's "
                            "shard)"));
  m.replica_bytes = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_replicated_bytes_total",
                              "Reduced-gradient bytes this daemon handed the "
                              "buddy keeping its shard's replica"));
  m.replicated_bytes = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_replication_seconds_total",
                              "Seconds the steps spent handing the reduced "
                              "gradient to the buddy (the replication's "
                              "share of the step)"));
  m.replication_seconds = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_replica_lag_steps",
                            "Steps the replica this daemon keeps is behind "
                            "its owner's shard (0 after every step that "
                            "replicated)"));
  m.replica_lag_steps = g->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_replica_mismatches_total",
                              "Replica versions found unequal to what the "
                              "owner all-gathered (the replica diverged)"));
  m.replica_mismatches = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_run_continuations_total",
                              "Runs carried on in a re-formed group (the "
                              "state of lost daemons taken from replicas)"));
  m.run_continuations = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_steps_rolled_back_total",
                              "Updates of this daemon's shard undone when a "
                              "run went on from the last step every shard "
                              "could be brought to (never an acknowledged "
                              "one)"));
  m.steps_rolled_back = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoints_written_total",
                              "Durable checkpoints of this daemon's shard "
                              "written (fsync'ed and renamed)"));
  m.checkpoints_written = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoint_failures_total",
                              "Durable checkpoints of this daemon's shard "
                              "that could not be written (logged)"));
  m.checkpoint_failures = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoint_bytes_total",
                              "Bytes of master parameters and optimizer "
                              "state written to durable checkpoints"));
  m.checkpoint_bytes = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoint_seconds_total",
                              "Seconds the checkpoint writer spent writing "
                              "(in the background of the steps)"));
  m.checkpoint_seconds = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_checkpoint_version",
                            "Newest version of the run this daemon wrote a "
                            "durable checkpoint of (-1: none)"));
  m.checkpoint_version = g->Get();
  m.checkpoint_version->Set(-1);
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoint_wait_seconds_total",
                              "Seconds steps waited for the checkpoint "
                              "writer (the disk slower than the steps)"));
  m.checkpoint_wait_seconds = c->Get();
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_checkpoint_restores_total",
                              "Runs that went on from a durable checkpoint "
                              "(a lost shard had no replica left): a "
                              "rollback"));
  m.checkpoint_restores = c->Get();
  metrics::Counter* samples;
  STARLING_ASSIGN_OR_RETURN(
      c, registry->AddCounter("starling_node_worker_samples_total",
                              "Training samples the local workers reported "
                              "(Client::ReportProgress)"));
  samples = c->Get();
  metrics::Gauge* loss;
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_worker_loss",
                            "Mean over the local workers of the last training "
                            "loss each reported (NaN before any report)"));
  loss = g->Get();
  metrics::Gauge* accuracy;
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge("starling_node_worker_accuracy",
                            "Mean over the local workers of the last accuracy "
                            "(0..1) each reported (NaN before any report)"));
  accuracy = g->Get();
  // NaN until a worker reports one: a dashboard draws no point rather
  // than a loss or accuracy of 0 nobody measured.
  loss->Set(std::nan(""));
  accuracy->Set(std::nan(""));
  m.progress = std::make_shared<WorkerProgress>(samples, loss, accuracy);
  STARLING_ASSIGN_OR_RETURN(
      g, registry->AddGauge(
             "starling_node_peer_transport",
             "1 for each peer (rank) of the data plane this daemon serves, "
             "with the transport its writes to that peer travel by (tcp, or "
             "the libfabric path); series of an earlier plane (a re-formed "
             "group) are set to 0, not removed",
             {"peer", "transport"}));
  m.peer_transports = std::make_shared<PeerTransports>(g);
  return m;
}

}  // namespace node
}  // namespace starling

namespace starling {
namespace node {

void PeerTransports::Set(const std::vector<std::string>& peer_transports) {
  std::vector<metrics::Gauge*> next;
  for (size_t peer = 0; peer < peer_transports.size(); ++peer) {
    if (peer_transports[peer].empty()) continue;  // this rank
    next.push_back(
        family_->WithLabels({absl::StrCat(peer), peer_transports[peer]}));
  }
  absl::MutexLock lock(&mu_);
  // The new ones first: a series in both planes never reads 0 between.
  for (metrics::Gauge* gauge : next) gauge->Set(1);
  for (metrics::Gauge* gauge : current_) {
    if (std::find(next.begin(), next.end(), gauge) == next.end()) {
      gauge->Set(0);
    }
  }
  current_ = std::move(next);
}

void WorkerProgress::Record(int worker_index,
                            const proto::PushGradientsRequest& push) {
  if (push.samples() > 0) {
    samples_->Increment(static_cast<double>(push.samples()));
  }
  if (!push.has_loss() && !push.has_accuracy()) return;
  absl::MutexLock lock(&mu_);
  const auto mean = [](const std::map<int, double>& values) {
    double sum = 0;
    for (const auto& [index, value] : values) sum += value;
    return sum / static_cast<double>(values.size());
  };
  if (push.has_loss()) {
    last_loss_[worker_index] = push.loss();
    loss_->Set(mean(last_loss_));
  }
  if (push.has_accuracy()) {
    last_accuracy_[worker_index] = push.accuracy();
    accuracy_->Set(mean(last_accuracy_));
  }
}

}  // namespace node
}  // namespace starling
