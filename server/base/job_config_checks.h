// The job options that the node daemons enforce, checked from one table on
// both sides: the coordinator refuses a bad --mode, --optimizer or
// --learning_rate at start-up (naming the flag and the value), and a daemon
// applies the same checks to the JobConfig it receives. Also the one list
// of mode names (--mode). Immutable data and stateless functions;
// thread-safe.
#ifndef STARLING_SERVER_BASE_JOB_CONFIG_CHECKS_H_
#define STARLING_SERVER_BASE_JOB_CONFIG_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/coordinator.pb.h"

namespace starling {
namespace proto {

struct ModeInfo {
  // As --mode spells it: "sync_sgd".
  const char* name;
  JobConfig::Mode mode;
  // False while the daemons cannot run it.
  bool implemented;
};

// Every mode of JobConfig::Mode but MODE_UNSPECIFIED, in enum order.
absl::Span<const ModeInfo> KnownModes();
// nullptr when unknown.
const ModeInfo* FindMode(absl::string_view name);
const ModeInfo* FindMode(JobConfig::Mode mode);
// Names of the implemented modes, in enum order.
std::vector<std::string> ImplementedModeNames();

// The EASGD family (sync_easgd, async_easgd, async_measgd, hogwild_easgd,
// round_robin_easgd): workers keep their own parameters, the daemons the
// centre variable.
bool IsElasticMode(JobConfig::Mode mode);
// Modes whose pushes the shard owners apply at once, one push at a time
// (PsEngine): parameter_server and the asynchronous EASGD variants. The
// others run the synchronous step (SyncEngine).
bool UsesShardOwners(JobConfig::Mode mode);
// Whether the job's daemons write durable checkpoints: a checkpoint_dir and
// checkpoint_every_steps or checkpoint_interval_ms set.
bool WritesCheckpoints(const JobConfig& config);
// The optimizer a job runs when none is named: easgd for the EASGD modes,
// sgd otherwise.
const char* DefaultOptimizer(JobConfig::Mode mode);

// Checks what every daemon enforces:
//   mode       known and implemented       (--mode)
//   optimizer  known and implemented       (--optimizer); easgd exactly in
//              the EASGD modes
//   learning_rate finite and > 0           (--learning_rate)
//   EASGD modes: elastic_tau >= 1, elastic_beta in (0, 1],
//              elastic_momentum in [0, 1)  (--elastic_*)
// InvalidArgument naming the flag and the value, e.g.
//   "--learning_rate=inf: the learning rate must be finite and > 0"
//   "--mode=sync_easgd is not implemented yet; implemented modes: ..."
absl::Status CheckJobConfig(const JobConfig& config);

}  // namespace proto
}  // namespace starling

#endif  // STARLING_SERVER_BASE_JOB_CONFIG_CHECKS_H_
