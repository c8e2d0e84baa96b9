// Elastic averaging (EASGD, Zhang, Choromanska & LeCun 2015) on one shard of
// the centre variable x~. With d = alpha * (worker - center):
//   ElasticCenterUpdate:  center += d           (the shard owner's side)
//   ElasticExchange:      center += d; worker -= d   (both sides at once)
// alpha is the moving rate (beta / num_workers in the paper's synchronous
// form).
//
// The daemons' side of the EASGD modes is ElasticCenterOptimizer
// (--optimizer=easgd): the workers compute their elastic differences d_i
// themselves (they hold x_i and the x~ they last pulled) and push them as
// "gradients"; the owner of a shard adds what arrives: x~ += sum_i d_i in
// Sync EASGD (one reduce-scatter of every worker's d), x~ += d_i per push
// in the asynchronous variants. AddRelaxed/CopyRelaxed are Hogwild EASGD's
// unserialised forms.
//
// Free functions are thread-compatible on the spans they are given, except
// AddRelaxed/CopyRelaxed (see there).
#ifndef STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_
#define STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/shard/optimizer/optimizer.h"

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

// The centre update of the EASGD modes: params += gradient_scale * grads
// (the pushed elastic differences, summed over workers by the
// reduce-scatter in Sync EASGD). gradient_scale stays 1 (the daemon does
// not average the differences: each is already weighted by alpha), and
// learning_rate and weight_decay are not used (the workers' local steps
// use the job's learning rate). No state. Thread-compatible.
class ElasticCenterOptimizer : public Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<ElasticCenterOptimizer>> Create(
      const OptimizerOptions& options, size_t shard_elements);

  absl::Status Apply(absl::Span<float> params, absl::Span<const float> grads,
                     int64_t step) override;
  uint64_t StateBytes() const override { return 0; }
  absl::string_view name() const override { return "easgd"; }

 private:
  ElasticCenterOptimizer(const OptimizerOptions& options, size_t shard_elements)
      : Optimizer(options, shard_elements, /*state_slots=*/0) {}
};

// Hogwild EASGD's centre update: center[i] += d[i], each element read and
// written with relaxed atomic loads and stores, without a lock. Safe to
// call from several threads on the same centre (no torn floats, no
// undefined behaviour), but an element updated by two calls at once may
// keep only one of the two additions (the read-modify-write is not
// atomic), and a concurrent CopyRelaxed may see some elements of a push
// and not others. InvalidArgument if the lengths differ, or (checked
// before anything changes) a difference is NaN or infinite.
absl::Status AddRelaxed(absl::Span<float> center, absl::Span<const float> d);
// out[i] = center[i], read with relaxed atomic loads (see AddRelaxed).
// REQUIRES: out.size() == center.size().
void CopyRelaxed(absl::Span<const float> center, absl::Span<float> out);

}  // namespace shard
}  // namespace starling

#endif  // STARLING_SERVER_SHARD_OPTIMIZER_EASGD_H_
