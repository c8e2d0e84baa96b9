#include "server/coordinator/coordinator_metrics.h"

#include "server/base/status_macros.h"
#include "server/metrics/histogram.h"

namespace starling {
namespace coordinator {

absl::StatusOr<CoordinatorMetrics> CoordinatorMetrics::Register(
    metrics::MetricsRegistry* registry) {
  CoordinatorMetrics m;
  STARLING_ASSIGN_OR_RETURN(
      metrics::CounterFamily * failures,
      registry->AddCounter("starling_coordinator_node_failures_total",
                           "Nodes marked lost after missing heartbeats."));
  m.node_failures = failures->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * group_size,
      registry->AddGauge("starling_coordinator_group_size",
                         "Members of the group that are not lost."));
  m.group_size = group_size->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * expected,
      registry->AddGauge("starling_coordinator_expected_nodes",
                         "Nodes the group forms with."));
  m.expected_nodes = expected->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * degraded,
      registry->AddGauge("starling_coordinator_degraded",
                         "1 once the group has lost a member, else 0."));
  m.degraded = degraded->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * epoch,
      registry->AddGauge("starling_coordinator_epoch",
                         "Epoch of the highest iteration reported."));
  m.epoch = epoch->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * iteration,
      registry->AddGauge("starling_coordinator_iteration",
                         "Highest global iteration reported by any rank."));
  m.iteration = iteration->Get();
  STARLING_ASSIGN_OR_RETURN(
      metrics::CounterFamily * schedules,
      registry->AddCounter("starling_coordinator_schedule_requests_total",
                           "GetSchedule calls answered."));
  m.schedule_requests = schedules->Get();
  // 1 ms .. ~65 s in powers of two.
  STARLING_ASSIGN_OR_RETURN(
      m.step_duration,
      registry->AddHistogram(
          "starling_coordinator_step_duration_seconds",
          "Step time (compute plus communication) reported per rank.",
          metrics::Histogram::ExponentialBounds(0.001, 2, 17), {"rank"}));
  STARLING_ASSIGN_OR_RETURN(
      m.compute_seconds,
      registry->AddCounter("starling_coordinator_compute_seconds_total",
                           "Time spent computing gradients, per rank.",
                           {"rank"}));
  STARLING_ASSIGN_OR_RETURN(
      m.communication_seconds,
      registry->AddCounter("starling_coordinator_communication_seconds_total",
                           "Time spent in collectives, per rank.", {"rank"}));
  STARLING_ASSIGN_OR_RETURN(
      m.loss,
      registry->AddGauge("starling_coordinator_loss",
                         "Last training loss reported, per rank.", {"rank"}));
  STARLING_ASSIGN_OR_RETURN(
      m.step_errors, registry->AddCounter(
                         "starling_coordinator_step_errors_total",
                         "Steps reported with an error, per rank.", {"rank"}));
  STARLING_ASSIGN_OR_RETURN(
      m.workers,
      registry->AddGauge("starling_coordinator_workers",
                         "Workers of each node by state (attached, missing, "
                         "finished), as its last heartbeat reported them.",
                         {"rank", "state"}));
  STARLING_ASSIGN_OR_RETURN(
      metrics::CounterFamily * started,
      registry->AddCounter("starling_coordinator_runs_started_total",
                           "Training runs begun."));
  m.runs_started = started->Get();
  STARLING_ASSIGN_OR_RETURN(
      m.runs_ended,
      registry->AddCounter("starling_coordinator_runs_ended_total",
                           "Training runs ended, by outcome: finished on "
                           "every rank, or failed.",
                           {"state"}));
  STARLING_ASSIGN_OR_RETURN(
      metrics::GaugeFamily * group_epoch,
      registry->AddGauge("starling_coordinator_group_epoch",
                         "The group's epoch: a new one at every membership "
                         "change (0 before a group forms)."));
  m.group_epoch = group_epoch->Get();
  STARLING_ASSIGN_OR_RETURN(
      m.state_writes,
      registry->AddCounter("starling_coordinator_state_writes_total",
                           "Writes of the coordinator's record of its job "
                           "(--state_file or --state_etcd), by result: ok or "
                           "failed.",
                           {"result"}));
  STARLING_ASSIGN_OR_RETURN(
      m.reformations,
      registry->AddCounter("starling_coordinator_reformations_total",
                           "Times the group re-formed with a new epoch, by "
                           "cause: node_lost (members dropped), "
                           "node_joined (nodes taken in) or node_back (a "
                           "member back within its grace).",
                           {"cause"}));
  STARLING_ASSIGN_OR_RETURN(
      metrics::CounterFamily * stale,
      registry->AddCounter("starling_coordinator_stale_calls_total",
                           "Calls from members of an earlier group epoch "
                           "(answered NOT_FOUND: they re-register to learn "
                           "the new group, or join afresh)."));
  m.stale_calls = stale->Get();
  STARLING_ASSIGN_OR_RETURN(
      m.calls_refused,
      registry->AddCounter("starling_coordinator_calls_refused_total",
                           "Calls refused for who made them: no credential "
                           "or a wrong one under the cluster secret, or a "
                           "member speaking for another member's rank; by "
                           "call.",
                           {"call"}));
  return m;
}

}  // namespace coordinator
}  // namespace starling
