#include "server/shard/optimizer/easgd.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/base/flush_denormals.h"
#include "server/base/status_macros.h"

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

absl::StatusOr<std::unique_ptr<ElasticCenterOptimizer>>
ElasticCenterOptimizer::Create(const OptimizerOptions& options,
                               size_t shard_elements) {
  STARLING_RETURN_IF_ERROR(ValidateOptimizerOptions(options));
  return std::unique_ptr<ElasticCenterOptimizer>(
      new ElasticCenterOptimizer(options, shard_elements));
}

absl::Status ElasticCenterOptimizer::Apply(absl::Span<float> params,
                                           absl::Span<const float> grads,
                                           int64_t step) {
  STARLING_RETURN_IF_ERROR(CheckApply(params, grads, step));
  // Subnormals as zero: each would cost ~100 normal operations.
  const FlushDenormals flush;
  const float scale = options_.gradient_scale;
  float* p = params.data();
  const float* d = grads.data();
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) p[i] += scale * d[i];
  return absl::OkStatus();
}

absl::Status AddRelaxed(absl::Span<float> center, absl::Span<const float> d) {
  if (center.size() != d.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("elastic update: centre shard holds ", center.size(),
                     " elements, the difference ", d.size()));
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (!std::isfinite(d[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("elastic difference element ", i, " is ", d[i],
                       " (the worker's parameters diverged?)"));
    }
  }
  float* c = center.data();
  for (size_t i = 0; i < d.size(); ++i) {
    float value;
    __atomic_load(&c[i], &value, __ATOMIC_RELAXED);
    value += d[i];
    __atomic_store(&c[i], &value, __ATOMIC_RELAXED);
  }
  return absl::OkStatus();
}

void CopyRelaxed(absl::Span<const float> center, absl::Span<float> out) {
  const float* c = center.data();
  for (size_t i = 0; i < center.size(); ++i) {
    float value;
    __atomic_load(&c[i], &value, __ATOMIC_RELAXED);
    out[i] = value;
  }
}

}  // namespace shard
}  // namespace starling
