// The job options that the node daemons enforce, checked from one table on
// both sides: the coordinator refuses a bad --mode, --optimizer or
// --learning_rate at start-up (naming the flag and the value), and a daemon
// applies the same checks to the JobConfig it receives. Also the one list
// of mode names (--mode). Immutable data and stateless functions;
// thread-safe.
#ifndef STARLING_PROTO_JOB_CONFIG_CHECKS_H_
#define STARLING_PROTO_JOB_CONFIG_CHECKS_H_

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

// Checks what every daemon enforces:
//   mode       known and implemented       (--mode)
//   optimizer  known and implemented       (--optimizer)
//   learning_rate finite and > 0           (--learning_rate)
// InvalidArgument naming the flag and the value, e.g.
//   "--learning_rate=inf: the learning rate must be finite and > 0"
//   "--mode=sync_easgd is not implemented yet; implemented modes: ..."
absl::Status CheckJobConfig(const JobConfig& config);

}  // namespace proto
}  // namespace starling

#endif  // STARLING_PROTO_JOB_CONFIG_CHECKS_H_
