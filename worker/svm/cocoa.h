// Distributed DCD: the CoCoA framework over a sum all-reduce.
//
// Each of W workers holds a disjoint part of the samples (partition.h) and
// its own a_i; every worker holds the same w. A round is:
//   1. local pass: LocalDcd::Pass over the worker's active samples against
//      a copy of w (with elimination), giving delta_w_k = sum_i da_i y_i x_i;
//   2. combine: one all-reduce sums [delta_w_k, each worker's PG max and
//      min in its own slot, counts] over the workers; every worker sets
//      w += gamma * sum_k delta_w_k and derives the same shrink decision
//      (dcd.h DecideAfterPass) from the same sums.
// Combine rules:
//   kAdd      CoCoA+ (Ma, Smith, Jaggi, Jordan, Richtarik & Takac, ICML
//             2015), the default: gamma = 1, and the local subproblem's
//             curvature is scaled by sigma' = W (the safe value for
//             adding): the step for sample i is -G / (W Q_ii + D_ii) and
//             the local w moves by W times the update, so the W workers'
//             updates can be added without overshooting.
//   kAverage  CoCoA (Jaggi, Smith, Takac, Terhorst, Krishnan, Hofmann &
//             Jordan, NIPS 2014): gamma = 1/W, sigma = 1, and each worker
//             scales its local da by 1/W, so w = sum_i a_i y_i x_i holds
//             and a stays in the box (a convex combination).
// Why adding is the default: with averaging a_i moves only 1/W of the way
// to where the local pass put it, so a sample whose a_i should reach 0 or
// U approaches the bound geometrically and never sits on it; its PG stays
// its full gradient G != 0, so neither the eps criterion (PGmax - PGmin)
// nor the elimination rule (a_i = 0 or U) fires, and the solve runs to
// max_passes (cocoa_test shows it). CoCoA+ clips each a_i to the box like
// plain DCD, so both rules work unchanged. Averaging is kept as an option
// for comparison.
// With W = 1 both are plain DCD (SolveDcd, up to the rounding of adding
// the pass's update to w at once rather than sample by sample).
//
// Every worker must use the same DcdOptions, combine rule and features:
// the first all-reduce compares a fingerprint of them (InvalidArgument
// naming the workers that differ). Every worker runs the same number of
// all-reduces: 1 + rounds + 1 (the final objective), and one more for w
// after a warm start; the decisions use only the summed values, which are
// the same on every worker.
//
// Thread safety: RunCocoaWorker is reentrant (one call per worker);
// InProcessAllReduce is thread-safe.
#ifndef STARLING_WORKER_SVM_COCOA_H_
#define STARLING_WORKER_SVM_COCOA_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/svm/dcd.h"

namespace starling {
namespace svm {

enum class Combine { kAverage, kAdd };
absl::StatusOr<Combine> ParseCombine(absl::string_view name);  // average|add
const char* CombineName(Combine combine);

// Replaces `data` by the element-wise sum of every worker's `data` (the
// same length on each). The Client adapter (svm_run.cc) sends float32;
// InProcessAllReduce sums in double.
using AllReduceFn = std::function<absl::Status(absl::Span<double> data)>;

// A round as every worker sees it (global sums).
struct RoundStats {
  PassStats pass;            // touched / dropped / inactive summed, PG max/min
  int64_t active_after = 0;  // samples the next round visits
};

struct CocoaOptions {
  DcdOptions dcd;
  Combine combine = Combine::kAdd;
  int workers = 1;    // W >= 1
  int worker_id = 0;  // 0 .. W - 1
  // Called on every worker after each round, with the global stats.
  std::function<void(const RoundStats&)> on_round;
  // A warm start (every worker or none: the fingerprint says): this
  // worker's a, one per sample of `local` (clipped to the box, see
  // LocalDcd::SetAlpha); w = sum_i a_i y_i x_i over every worker's samples
  // by one more all-reduce after the handshake. How a solve goes on after
  // its group re-formed: the a each worker held, its samples re-dealt.
  bool warm_start = false;
  std::vector<double> initial_alpha;
  // Where this worker's a is left when an all-reduce fails and the solve
  // ends early (may be null): in the box whatever round it stopped in, a
  // warm start for a solve that goes on.
  std::vector<double>* alpha_on_failure = nullptr;
};

struct CocoaResult {
  std::vector<double> w;      // the same on every worker
  std::vector<double> alpha;  // this worker's samples
  int passes = 0;             // rounds
  int64_t touched = 0;        // global sum over the rounds
  bool converged = false;
  std::vector<RoundStats> history;
  std::vector<SampleEvent> events;  // this worker's, with record_events
  // At the final (w, a), summed over the workers: P(w), f(a), P + f.
  double primal = 0, dual = 0;
  double gap() const { return primal + dual; }
};

// Runs worker `options.worker_id`'s side of the solve on its samples
// `local`. InvalidArgument for bad options or data, or when the workers'
// fingerprints differ; whatever `all_reduce` returns, annotated with the
// round.
absl::StatusOr<CocoaResult> RunCocoaWorker(const Problem& local,
                                           const CocoaOptions& options,
                                           const AllReduceFn& all_reduce);

// An all-reduce among `workers` threads of this process: each calls
// Reduce(worker, data); the last to arrive sums (in worker order, in
// double) and wakes the others. A worker that waits past `timeout` gets
// DeadlineExceeded naming the workers that did not arrive.
class InProcessAllReduce {
 public:
  InProcessAllReduce(int workers, absl::Duration timeout);
  InProcessAllReduce(const InProcessAllReduce&) = delete;
  InProcessAllReduce& operator=(const InProcessAllReduce&) = delete;

  absl::Status Reduce(int worker, absl::Span<double> data);
  // Calls of worker 0 so far.
  int64_t calls() const;

 private:
  const int workers_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<double>> inputs_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> arrived_ ABSL_GUARDED_BY(mu_);
  int arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> sum_ ABSL_GUARDED_BY(mu_);
  absl::CondVar done_;
};

// Runs W simulated workers, one thread each, on parts[k] (parts.size() ==
// W), with an InProcessAllReduce. Returns every worker's result, or the
// first failure.
absl::StatusOr<std::vector<CocoaResult>> SimulateCocoa(
    const std::vector<Problem>& parts, const CocoaOptions& options,
    absl::Duration timeout = absl::Seconds(600));

}  // namespace svm
}  // namespace starling

#endif  // STARLING_WORKER_SVM_COCOA_H_
