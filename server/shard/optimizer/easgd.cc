#include "server/shard/optimizer/easgd.h"

#include "absl/strings/str_cat.h"

namespace starling {
namespace shard {
namespace {

absl::Status CheckElasticArgs(size_t center, size_t worker, float alpha) {
  if (center != worker) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic update: centre shard holds ", center,
                     " elements, worker parameters ", worker));
  }
  // Written so that NaN fails too.
  if (!(alpha >= 0.0f && alpha <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic update: alpha ", alpha, " must be in [0, 1]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ElasticCenterUpdate(absl::Span<float> center,
                                 absl::Span<const float> worker, float alpha) {
  absl::Status status = CheckElasticArgs(center.size(), worker.size(), alpha);
  if (!status.ok()) return status;
  float* c = center.data();
  const float* w = worker.data();
  for (size_t i = 0; i < center.size(); ++i) {
    c[i] += alpha * (w[i] - c[i]);
  }
  return absl::OkStatus();
}

absl::Status ElasticExchange(absl::Span<float> center, absl::Span<float> worker,
                             float alpha) {
  absl::Status status = CheckElasticArgs(center.size(), worker.size(), alpha);
  if (!status.ok()) return status;
  float* c = center.data();
  float* w = worker.data();
  for (size_t i = 0; i < center.size(); ++i) {
    const float d = alpha * (w[i] - c[i]);
    c[i] += d;
    w[i] -= d;
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
