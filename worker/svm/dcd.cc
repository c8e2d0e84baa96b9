// Dual coordinate descent with shrinking; see dcd.h for the problem and the
// rules. Terms: G is the dual gradient of the visited sample, PG its
// projection on [0, U] (0 where the box stops a move), "active" the samples
// a pass visits, "dropped" one eliminated by the rule.
#include "worker/svm/dcd.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/train/dataset.h"

namespace starling {
namespace svm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x_i . v over the features (without the bias).
double Dot(const float* x, const double* v, int d) {
  double s = 0;
  for (int j = 0; j < d; ++j) s += static_cast<double>(x[j]) * v[j];
  return s;
}

}  // namespace

absl::StatusOr<Loss> ParseLoss(absl::string_view name) {
  if (name == "l1") return Loss::kL1;
  if (name == "l2") return Loss::kL2;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown loss \"", name, "\"; expected l1 (hinge) or l2 (squared)"));
}

const char* LossName(Loss loss) { return loss == Loss::kL1 ? "l1" : "l2"; }

absl::Status ValidateOptions(const DcdOptions& o) {
  if (!(o.c > 0) || !std::isfinite(o.c)) {
    return absl::InvalidArgumentError(
        absl::StrCat("C must be finite and > 0, got ", o.c));
  }
  if (!(o.eps > 0) || !std::isfinite(o.eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eps must be finite and > 0, got ", o.eps));
  }
  if (!std::isfinite(o.bias)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bias must be finite (<= 0: none), got ", o.bias));
  }
  if (o.max_passes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_passes must be >= 1, got ", o.max_passes));
  }
  return absl::OkStatus();
}

absl::Status ValidateProblem(const Problem& p) {
  if (p.features < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("features must be >= 1, got ", p.features));
  }
  if (p.x.size() != static_cast<size_t>(p.size()) * p.features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "x holds ", p.x.size(), " floats; ", p.size(), " rows of ", p.features,
        " features need ", static_cast<size_t>(p.size()) * p.features));
  }
  for (int64_t i = 0; i < p.size(); ++i) {
    if (p.y[i] != 1 && p.y[i] != -1) {
      return absl::InvalidArgumentError(absl::StrCat("label of row ", i, " is ",
                                                     static_cast<int>(p.y[i]),
                                                     "; expected +1 or -1"));
    }
  }
  for (size_t k = 0; k < p.x.size(); ++k) {
    if (!std::isfinite(p.x[k])) {
      return absl::InvalidArgumentError(absl::StrCat("feature ", k % p.features,
                                                     " of row ", k / p.features,
                                                     " is not finite"));
    }
  }
  return absl::OkStatus();
}

int WeightSize(const Problem& problem, const DcdOptions& options) {
  return problem.features + (options.bias > 0 ? 1 : 0);
}

double UpperBound(const DcdOptions& o) {
  return o.loss == Loss::kL1 ? o.c : kInf;
}

double DiagonalShift(const DcdOptions& o) {
  return o.loss == Loss::kL1 ? 0.0 : 1.0 / (2.0 * o.c);
}

double Decision(const Problem& p, const DcdOptions& o,
                absl::Span<const double> w, int64_t row) {
  double s = Dot(p.x.data() + row * p.features, w.data(), p.features);
  if (o.bias > 0) s += o.bias * w[p.features];
  return s;
}

double LossSum(const Problem& p, const DcdOptions& o,
               absl::Span<const double> w) {
  double sum = 0;
  for (int64_t i = 0; i < p.size(); ++i) {
    const double margin = std::max(0.0, 1.0 - p.y[i] * Decision(p, o, w, i));
    sum += o.loss == Loss::kL1 ? margin : margin * margin;
  }
  return sum;
}

double PrimalObjective(const Problem& p, const DcdOptions& o,
                       absl::Span<const double> w) {
  double ww = 0;
  for (double v : w) ww += v * v;
  return 0.5 * ww + o.c * LossSum(p, o, w);
}

double DualObjective(const Problem& /*problem*/, const DcdOptions& o,
                     absl::Span<const double> w,
                     absl::Span<const double> alpha) {
  double ww = 0;
  for (double v : w) ww += v * v;
  const double shift = DiagonalShift(o);
  double sum = 0, squares = 0;
  for (double a : alpha) {
    sum += a;
    squares += a * a;
  }
  return 0.5 * ww + 0.5 * shift * squares - sum;
}

ShrinkDecision DecideAfterPass(double pg_max, double pg_min, bool any_inactive,
                               double eps) {
  ShrinkDecision d;
  if (pg_max - pg_min <= eps) {
    // Met on the active set: done if that was every sample; otherwise
    // every sample comes back and is checked with no thresholds.
    if (!any_inactive) {
      d.stop = true;
    } else {
      d.restore = true;
    }
    return d;  // thresholds +inf / -inf
  }
  d.pg_max_old = pg_max <= 0 ? kInf : pg_max;
  d.pg_min_old = pg_min >= 0 ? -kInf : pg_min;
  return d;
}

LocalDcd::LocalDcd(const Problem& problem, const DcdOptions& options,
                   uint64_t stream)
    : problem_(problem),
      options_(options),
      stream_(stream),
      upper_(UpperBound(options)),
      shift_(DiagonalShift(options)),
      q_diag_(problem.size()),
      alpha_(problem.size(), 0.0),
      alpha_start_(problem.size(), 0.0),
      active_(problem.size()),
      pg_max_old_(kInf),
      pg_min_old_(-kInf) {
  const int d = problem.features;
  const double bias2 = options.bias > 0 ? options.bias * options.bias : 0.0;
  for (int64_t i = 0; i < problem.size(); ++i) {
    const float* x = problem.x.data() + i * d;
    double s = bias2;
    for (int j = 0; j < d; ++j) s += static_cast<double>(x[j]) * x[j];
    q_diag_[i] = s;
    active_[i] = i;
  }
}

PassStats LocalDcd::Pass(int pass, absl::Span<double> w_local, double sigma,
                         absl::Span<double> delta_w) {
  PassStats stats;
  stats.pass = pass;
  stats.touched = static_cast<int64_t>(active_.size());
  alpha_start_ = alpha_;
  // The visiting order: a permutation of the active list, deterministic in
  // (seed, stream, pass) (train::EpochOrder: Fisher-Yates on mt19937_64).
  const std::vector<int64_t> order =
      train::EpochOrder(options_.seed ^ (stream_ * 0x9e3779b97f4a7c15ull), pass,
                        static_cast<int64_t>(active_.size()));
  std::vector<int64_t> kept;
  kept.reserve(active_.size());
  const int d = problem_.features;
  const bool has_bias = options_.bias > 0;
  for (int64_t k : order) {
    const int64_t i = active_[k];
    const float* x = problem_.x.data() + i * d;
    const double y = problem_.y[i];
    double wx = Dot(x, w_local.data(), d);
    if (has_bias) wx += options_.bias * w_local[d];
    const double g = y * wx - 1.0 + shift_ * alpha_[i];
    double pg = 0;
    if (alpha_[i] == 0) {
      if (options_.elimination && g > pg_max_old_) {
        ++stats.dropped;
        if (options_.record_events) {
          events_.push_back({pass, i, SampleEvent::Kind::kDropped, alpha_[i]});
        }
        continue;
      }
      pg = std::min(g, 0.0);
    } else if (alpha_[i] == upper_) {
      if (options_.elimination && g < pg_min_old_) {
        ++stats.dropped;
        if (options_.record_events) {
          events_.push_back({pass, i, SampleEvent::Kind::kDropped, alpha_[i]});
        }
        continue;
      }
      pg = std::max(g, 0.0);
    } else {
      pg = g;
    }
    kept.push_back(i);
    stats.pg_max = std::max(stats.pg_max, pg);
    stats.pg_min = std::min(stats.pg_min, pg);
    if (std::fabs(pg) <= 1e-12) continue;
    const double old = alpha_[i];
    alpha_[i] = std::min(std::max(old - g / (sigma * q_diag_[i] + shift_), 0.0),
                         upper_);
    const double step = (alpha_[i] - old) * y;
    const double local_step = sigma * step;
    for (int j = 0; j < d; ++j) w_local[j] += local_step * x[j];
    if (has_bias) w_local[d] += local_step * options_.bias;
    if (!delta_w.empty()) {
      for (int j = 0; j < d; ++j) delta_w[j] += step * x[j];
      if (has_bias) delta_w[d] += step * options_.bias;
    }
  }
  active_ = std::move(kept);
  stats.inactive = problem_.size() - static_cast<int64_t>(active_.size());
  return stats;
}

void LocalDcd::SetAlpha(absl::Span<const double> alpha) {
  for (size_t i = 0; i < alpha_.size(); ++i) {
    double a = std::min(std::max(alpha[i], 0.0), upper_);
    if (std::isfinite(upper_) && upper_ - a <= 1e-6 * upper_) a = upper_;
    alpha_[i] = a;
  }
  alpha_start_ = alpha_;
  active_.resize(problem_.size());
  for (int64_t i = 0; i < problem_.size(); ++i) active_[i] = i;
  pg_max_old_ = kInf;
  pg_min_old_ = -kInf;
}

void LocalDcd::ScaleLastPass(double gamma) {
  for (size_t i = 0; i < alpha_.size(); ++i) {
    alpha_[i] = alpha_start_[i] + gamma * (alpha_[i] - alpha_start_[i]);
  }
}

void LocalDcd::Apply(const ShrinkDecision& decision, int pass) {
  pg_max_old_ = decision.pg_max_old;
  pg_min_old_ = decision.pg_min_old;
  if (!decision.restore ||
      static_cast<int64_t>(active_.size()) == problem_.size()) {
    return;
  }
  std::vector<bool> in(problem_.size(), false);
  for (int64_t i : active_) in[i] = true;
  active_.clear();
  for (int64_t i = 0; i < problem_.size(); ++i) {
    if (!in[i] && options_.record_events) {
      events_.push_back({pass, i, SampleEvent::Kind::kRestored, alpha_[i]});
    }
    active_.push_back(i);
  }
}

absl::StatusOr<DcdResult> SolveDcd(const Problem& problem,
                                   const DcdOptions& options) {
  absl::Status status = ValidateOptions(options);
  if (status.ok()) status = ValidateProblem(problem);
  if (!status.ok()) return status;
  DcdResult result;
  result.w.assign(WeightSize(problem, options), 0.0);
  LocalDcd local(problem, options, /*stream=*/0);
  for (int pass = 1; pass <= options.max_passes; ++pass) {
    PassStats stats = local.Pass(pass, absl::MakeSpan(result.w), 1.0, {});
    const ShrinkDecision decision = DecideAfterPass(
        stats.pg_max, stats.pg_min, stats.inactive > 0, options.eps);
    stats.restored = decision.restore;
    local.Apply(decision, pass);
    result.passes = pass;
    result.touched += stats.touched;
    result.history.push_back(stats);
    if (decision.stop) {
      result.converged = true;
      break;
    }
  }
  result.alpha = local.alpha();
  result.events = local.events();
  return result;
}

}  // namespace svm
}  // namespace starling
