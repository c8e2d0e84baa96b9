// The optimizers a job may name: the one list that the coordinator
// validates --optimizer against and that the daemons' optimizer factory
// builds from, with the per-element state each keeps beside the parameters
// (optimizer state bytes of a shard = state_slots x shard bytes).
// Immutable data; thread-safe.
#ifndef STARLING_SERVER_BASE_OPTIMIZER_NAMES_H_
#define STARLING_SERVER_BASE_OPTIMIZER_NAMES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace starling {

struct OptimizerInfo {
  // Exact, lower case: "sgd".
  const char* name;
  // Floats of state per parameter element (momentum 1, Adam 2).
  int state_slots;
  // False for "none": plain all-reduce, the shard is never updated.
  bool updates;
  // False while the daemons cannot run it; the coordinator refuses it at
  // start-up rather than letting every daemon fail after joining.
  bool implemented;
};

// The daemons' fixed hyper-parameters (a job names only the optimizer and
// its learning rate): momentum's velocity decay, Adam's moment decays.
// Doubles, so that Python sees exactly these values (the daemons use them
// as float).
inline constexpr double kDaemonMomentum = 0.9;
inline constexpr double kDaemonAdamBeta1 = 0.9;
inline constexpr double kDaemonAdamBeta2 = 0.999;

// Every optimizer name known, implemented or not, in a fixed order.
absl::Span<const OptimizerInfo> KnownOptimizers();

// The entry for `name`, or nullptr when no optimizer has that name.
const OptimizerInfo* FindOptimizer(absl::string_view name);

enum class OptimizerFilter {
  kAll,
  // Those the daemons can run (the coordinator accepts).
  kImplemented,
  // Implemented and updating the shard (the optimizer factory builds).
  kUpdating,
};

// Names passing `filter`, in KnownOptimizers() order.
std::vector<std::string> OptimizerNames(OptimizerFilter filter);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_OPTIMIZER_NAMES_H_
