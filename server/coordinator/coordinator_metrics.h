// CoordinatorMetrics: the metrics the coordinator exports (all named
// starling_coordinator_*), registered once in the registry it is given.
//
//   node_failures_total            counter   nodes marked LOST
//   group_size                     gauge     members not LOST
//   expected_nodes                 gauge     nodes the group forms with
//   degraded                       gauge     1 once a member was lost
//   epoch, iteration               gauge     job progress (highest reported)
//   step_duration_seconds{rank}    histogram compute + communication per step
//   compute_seconds_total{rank}    counter   time computing gradients
//   communication_seconds_total{rank} counter time in collectives
//   loss{rank}                     gauge     last loss reported
//   step_errors_total{rank}        counter   steps reported with an error
//   schedule_requests_total        counter   GetSchedule calls answered
//   workers{rank,state}            gauge     each node's workers by state
//                                            (attached, missing, finished),
//                                            as its last heartbeat said
//   runs_started_total             counter   training runs begun
//   runs_ended_total{state}        counter   runs ended: finished (on every
//                                            rank) or failed (first failure)
//   group_epoch                    gauge     the group's epoch
//   reformations_total{cause}      counter   groups re-formed: node_lost
//                                            (one or more dropped),
//                                            node_joined (taken in only) or
//                                            node_back (back in its grace)
//   state_writes_total{result}     counter   writes of the state file
//   stale_calls_total              counter   members' calls of an earlier
//                                            group epoch (sent to Rejoin)
//   calls_refused_total{call}      counter   calls refused for their
//                                            caller (no or a wrong
//                                            credential, another member's
//                                            rank: CheckCaller)
//
// The pointers are owned by the registry. Thread-safe (metrics are).
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include "absl/status/statusor.h"
#include "server/metrics/metrics_registry.h"

namespace starling {
namespace coordinator {

struct CoordinatorMetrics {
  // Registers every family in `registry` (borrowed; must outlive the
  // returned pointers). AlreadyExists if they are registered already.
  static absl::StatusOr<CoordinatorMetrics> Register(
      metrics::MetricsRegistry* registry);

  metrics::Counter* node_failures = nullptr;
  metrics::Gauge* group_size = nullptr;
  metrics::Gauge* expected_nodes = nullptr;
  metrics::Gauge* degraded = nullptr;
  metrics::Gauge* epoch = nullptr;
  metrics::Gauge* iteration = nullptr;
  metrics::Counter* schedule_requests = nullptr;
  metrics::HistogramFamily* step_duration = nullptr;
  metrics::CounterFamily* compute_seconds = nullptr;
  metrics::CounterFamily* communication_seconds = nullptr;
  metrics::GaugeFamily* loss = nullptr;
  metrics::CounterFamily* step_errors = nullptr;
  metrics::GaugeFamily* workers = nullptr;
  metrics::Counter* runs_started = nullptr;
  metrics::CounterFamily* runs_ended = nullptr;
  // The group epoch (0 before a group forms) and the state file's writes
  // by result ("ok", "failed").
  metrics::Gauge* group_epoch = nullptr;
  metrics::CounterFamily* state_writes = nullptr;
  // Re-formations by cause ("node_lost", "node_joined", "node_back").
  metrics::CounterFamily* reformations = nullptr;
  metrics::Counter* stale_calls = nullptr;
  metrics::CounterFamily* calls_refused = nullptr;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
