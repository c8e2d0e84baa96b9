// Elastic averaging (EASGD, Zhang, Choromanska & LeCun 2015) on one shard of
// the centre variable. With d = alpha * (worker - center):
//   ElasticCenterUpdate:  center += d           (the shard owner's side)
//   ElasticExchange:      center += d; worker -= d   (both sides at once)
// alpha is the moving rate (beta / num_workers in the paper's synchronous
// form). Free functions; thread-compatible on the spans they are given
// (Hogwild EASGD calls them without locks and accepts the races).
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace starling {
namespace shard {

// center[i] += alpha * (worker[i] - center[i]). InvalidArgument if the
// lengths differ or alpha is not in [0, 1] (outside it the centre
// overshoots). Nothing changes on error.
absl::Status ElasticCenterUpdate(absl::Span<float> center,
                                 absl::Span<const float> worker, float alpha);

// d = alpha * (worker[i] - center[i]); center[i] += d; worker[i] -= d.
// Same errors as ElasticCenterUpdate.
absl::Status ElasticExchange(absl::Span<float> center, absl::Span<float> worker,
                             float alpha);

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_
