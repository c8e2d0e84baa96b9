// CheckFinite: rejects float32 data holding NaN or infinity (gradients
// from a worker or a frame, initial parameters), naming the first bad
// element. The scan is a branch-free integer test on the exponent bits, so it
// vectorizes and costs about one pass over memory. Free function;
// thread-safe.
#ifndef STARLING_SERVER_SHARD_FINITE_CHECK_H_
#define STARLING_SERVER_SHARD_FINITE_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace starling {
namespace shard {

// OK if every value is finite. Otherwise InvalidArgument
//   "<what> element 1234 of 4096 is nan"
// naming the first non-finite element by its index in `values`.
absl::Status CheckFinite(absl::Span<const float> values,
                         absl::string_view what);

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_FINITE_CHECK_H_
