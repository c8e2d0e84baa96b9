// Dual coordinate descent (DCD) for L2-regularised linear SVMs, with
// adaptive sample elimination ("shrinking").
//
// The problem (Hsieh, Chang, Lin, Keerthi & Sundararajan, "A Dual
// Coordinate Descent Method for Large-scale Linear SVM", ICML 2008): for
// samples (x_i, y_i), y_i = +1 or -1,
//
//   primal  min_w  P(w) = 1/2 w.w + C sum_i xi(w; x_i, y_i)
//           xi = max(0, 1 - y_i w.x_i)      L1 loss (hinge; LIBLINEAR -s 3)
//           xi = max(0, 1 - y_i w.x_i)^2    L2 loss (squared hinge; -s 1)
//   dual    min_a  f(a) = 1/2 a'(Q + D)a - e'a,  0 <= a_i <= U,
//           Q_ij = y_i y_j x_i.x_j,  U = C, D_ii = 0 (L1);  U = inf,
//           D_ii = 1/(2C) (L2);  w = sum_i a_i y_i x_i, and P(w*) = -f(a*).
//
// With a bias (LIBLINEAR -B b, b > 0) every sample gets an extra constant
// feature b whose weight is regularised like the others.
//
// A pass visits the active samples in a seeded random order. For sample i,
// G = y_i w.x_i - 1 + D_ii a_i is the dual gradient, PG its projection on
// the box, and a_i <- min(max(a_i - G / (Q_ii + D_ii), 0), U).
//
// Elimination (LIBLINEAR's shrinking rule, written from the description):
// PGmax_old / PGmin_old are the largest / smallest PG of the previous pass
// (+inf / -inf at first, and +inf where the previous max was <= 0, -inf
// where the previous min was >= 0). A sample with a_i = 0 and
// G > PGmax_old, or a_i = U and G < PGmin_old, is dropped from later passes.
// When PGmax - PGmin of a pass falls to eps or below, every dropped sample
// is restored and the thresholds are reset to +inf / -inf; the solver stops
// only when a pass with no sample dropped (over all samples) meets the
// criterion, so a wrong drop is undone.
//
// Thread safety: functions are thread-safe; a LocalDcd is thread-compatible.
#ifndef STARLING_WORKER_SVM_DCD_H_
#define STARLING_WORKER_SVM_DCD_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace starling {
namespace svm {

enum class Loss {
  kL1,  // hinge; LIBLINEAR -s 3
  kL2,  // squared hinge; LIBLINEAR -s 1
};
absl::StatusOr<Loss> ParseLoss(absl::string_view name);  // "l1" or "l2"
const char* LossName(Loss loss);

// A training set, borrowed: x and y must outlive every use of the Problem.
struct Problem {
  int features = 0;            // d, without the bias feature
  absl::Span<const float> x;   // size() rows of `features` floats
  absl::Span<const int8_t> y;  // +1 or -1 per row
  int64_t size() const { return static_cast<int64_t>(y.size()); }
};

struct DcdOptions {
  Loss loss = Loss::kL1;
  double c = 1.0;  // C > 0
  // Stop when PGmax - PGmin over all samples is <= eps (LIBLINEAR -e).
  double eps = 0.1;
  // Value of the constant extra feature; <= 0: no bias (LIBLINEAR -B).
  double bias = 1.0;
  bool elimination = true;
  int max_passes = 1000;  // >= 1
  uint64_t seed = 1;      // the passes' sample orders
  // Keep a SampleEvent for every drop and restore (memory: one per event).
  bool record_events = false;
};

// InvalidArgument naming the bad field, or OK.
absl::Status ValidateOptions(const DcdOptions& options);
// InvalidArgument naming the bad row or size, or OK.
absl::Status ValidateProblem(const Problem& problem);

// The weight vector's length: features, plus one with a bias.
int WeightSize(const Problem& problem, const DcdOptions& options);
// U and D_ii of the dual (see the file comment).
double UpperBound(const DcdOptions& options);
double DiagonalShift(const DcdOptions& options);

// w.x for row `row` of `problem` (the bias term included).
double Decision(const Problem& problem, const DcdOptions& options,
                absl::Span<const double> w, int64_t row);

// Sum over the samples of xi(w) (without the factor C).
double LossSum(const Problem& problem, const DcdOptions& options,
               absl::Span<const double> w);
// P(w) and f(a) (the dual in minimisation form, with the w given, which
// must be sum_i a_i y_i x_i). The duality gap P(w) + f(a) is >= 0 and 0 at
// the optimum.
double PrimalObjective(const Problem& problem, const DcdOptions& options,
                       absl::Span<const double> w);
double DualObjective(const Problem& problem, const DcdOptions& options,
                     absl::Span<const double> w,
                     absl::Span<const double> alpha);

// What one pass did. For a distributed solve these are summed (max/min for
// the PG bounds) over the workers.
struct PassStats {
  int pass = 0;          // from 1
  int64_t touched = 0;   // coordinates visited: the active samples at start
  int64_t dropped = 0;   // eliminated in this pass
  int64_t inactive = 0;  // eliminated samples after the pass
  double pg_max = -std::numeric_limits<double>::infinity();
  double pg_min = std::numeric_limits<double>::infinity();
  bool restored = false;  // the pass met eps with samples out: all back
  double violation() const { return pg_max - pg_min; }
};

struct SampleEvent {
  enum class Kind { kDropped, kRestored };
  int pass = 0;        // the pass that dropped it, or after which it came back
  int64_t sample = 0;  // row of the problem
  Kind kind = Kind::kDropped;
  double alpha = 0;  // a_i then (0 or U for a drop)
};

// What the shrinking rule decides after a pass, from that pass's global
// PG bounds and whether any sample (on any worker) is out.
struct ShrinkDecision {
  bool stop = false;     // converged over all samples
  bool restore = false;  // restore every sample; thresholds reset
  double pg_max_old = std::numeric_limits<double>::infinity();
  double pg_min_old = -std::numeric_limits<double>::infinity();
};
ShrinkDecision DecideAfterPass(double pg_max, double pg_min, bool any_inactive,
                               double eps);

// One worker's share of the dual: a_i of its samples, which are active,
// and the shrinking thresholds. Used by SolveDcd (one worker) and by the
// distributed solver (cocoa.h).
class LocalDcd {
 public:
  // Borrows `problem` for its lifetime. `stream` varies the pass order
  // between workers with the same seed. REQUIRES: valid problem, options.
  LocalDcd(const Problem& problem, const DcdOptions& options, uint64_t stream);

  // One pass over the active samples in a random order (the permutation
  // of pass `pass` for this seed and stream), updating a and `w_local`.
  // CoCoA's local subproblem: `sigma` (>= 1) scales the curvature, so the
  // step for sample i is -G / (sigma Q_ii + D_ii), and w_local moves by
  // sigma * delta * y_i x_i; `delta_w` (empty, or WeightSize long)
  // accumulates the unscaled sum_i delta_i y_i x_i. SolveDcd: sigma 1, no
  // delta_w. Records drops if options.record_events.
  PassStats Pass(int pass, absl::Span<double> w_local, double sigma,
                 absl::Span<double> delta_w);

  // For the CoCoA average: a_i <- a_start_i + gamma (a_i - a_start_i),
  // a_start the values before the last Pass().
  void ScaleLastPass(double gamma);

  // Thresholds for the next pass; restore puts every sample back.
  void Apply(const ShrinkDecision& decision, int pass);

  // Starts from `alpha` (one per sample) instead of zeros: each value is
  // clipped to the box [0, U], and one within 1e-6 of U (relative) is put
  // on it, so that values that crossed float32 keep their bound. Every
  // sample is active again. REQUIRES: alpha.size() == the problem's.
  void SetAlpha(absl::Span<const double> alpha);

  const std::vector<double>& alpha() const { return alpha_; }
  int64_t active() const { return static_cast<int64_t>(active_.size()); }
  const std::vector<SampleEvent>& events() const { return events_; }

 private:
  const Problem& problem_;
  const DcdOptions options_;
  const uint64_t stream_;
  const double upper_, shift_;
  std::vector<double> q_diag_;  // x_i.x_i (bias included)
  std::vector<double> alpha_, alpha_start_;
  std::vector<int64_t> active_;
  double pg_max_old_, pg_min_old_;
  std::vector<SampleEvent> events_;
};

struct DcdResult {
  std::vector<double> w;      // WeightSize long; w.back() is the bias weight
  std::vector<double> alpha;  // per sample
  int passes = 0;
  int64_t touched = 0;  // sum of PassStats::touched
  bool converged = false;
  std::vector<PassStats> history;
  std::vector<SampleEvent> events;  // with options.record_events
};

// Solves on one machine. InvalidArgument for bad options or data.
absl::StatusOr<DcdResult> SolveDcd(const Problem& problem,
                                   const DcdOptions& options);

}  // namespace svm
}  // namespace starling

#endif  // STARLING_WORKER_SVM_DCD_H_
