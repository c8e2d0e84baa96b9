// CoCoA / CoCoA+ rounds over a sum all-reduce; see cocoa.h.
//
// The round message, M = WeightSize + 2W + 4 doubles:
//   [0, D)          delta_w of this worker (unscaled)
//   [D, D+W)        slot k: worker k's PG max of the pass (others put 0)
//   [D+W, D+2W)     slot k: worker k's PG min
//   D+2W ..         touched, dropped, inactive after the pass, samples
//                   (summed)
// A sum cannot carry a max, so each worker writes its bound into its own
// slot and every worker takes the max (min) over the slots. Infinite
// bounds (no sample visited) travel as +-kHuge: the daemons may refuse
// non-finite values, and float32 cannot hold DBL_MAX.
#include "worker/svm/cocoa.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <thread>  // NOLINT(build/c++11): simulated workers
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace svm {
namespace {

constexpr double kHuge = 1e30;
constexpr double kInf = std::numeric_limits<double>::infinity();

double Encode(double v) { return std::max(-kHuge, std::min(kHuge, v)); }
double Decode(double v) {
  if (v >= kHuge) return kInf;
  if (v <= -kHuge) return -kInf;
  return v;
}

// 20 bits (exact in float32) of a hash of what every worker must share.
double Fingerprint(const Problem& local, const CocoaOptions& o) {
  const DcdOptions& d = o.dcd;
  const std::string text = absl::StrCat(
      LossName(d.loss), "|", d.c, "|", d.eps, "|", d.bias, "|", d.elimination,
      "|", d.max_passes, "|", d.seed, "|", CombineName(o.combine), "|",
      o.workers, "|", local.features, "|", o.warm_start);
  return static_cast<double>(std::hash<std::string>()(text) & 0xFFFFF);
}

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (while ", what, ")"));
}

}  // namespace

absl::StatusOr<Combine> ParseCombine(absl::string_view name) {
  if (name == "average") return Combine::kAverage;
  if (name == "add") return Combine::kAdd;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown combine rule \"", name,
                   "\"; expected average (CoCoA) or add "
                   "(CoCoA+)"));
}

const char* CombineName(Combine combine) {
  return combine == Combine::kAverage ? "average" : "add";
}

absl::StatusOr<CocoaResult> RunCocoaWorker(const Problem& local,
                                           const CocoaOptions& o,
                                           const AllReduceFn& all_reduce) {
  if (o.workers < 1 || o.worker_id < 0 || o.worker_id >= o.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker id ", o.worker_id, " of ", o.workers,
                     " workers: expected 0 <= id < workers"));
  }
  absl::Status status = ValidateOptions(o.dcd);
  if (status.ok()) status = ValidateProblem(local);
  if (!status.ok()) return status;
  const int w_count = o.workers;
  const int me = o.worker_id;

  // Handshake: slot k holds worker k's fingerprint; a second block counts
  // the workers claiming each id.
  std::vector<double> hello(2 * w_count, 0.0);
  const double mine = Fingerprint(local, o);
  hello[me] = mine;
  hello[w_count + me] = 1.0;
  status = all_reduce(absl::MakeSpan(hello));
  if (!status.ok()) return Annotate(status, "comparing the workers' options");
  std::vector<std::string> differ;
  for (int k = 0; k < w_count; ++k) {
    if (hello[w_count + k] != 1.0) {
      return absl::InvalidArgumentError(
          absl::StrCat(hello[w_count + k], " workers claim worker id ", k,
                       " of ", w_count, "; each id must be taken once"));
    }
    if (hello[k] != mine) differ.push_back(absl::StrCat(k));
  }
  if (!differ.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workers ", absl::StrJoin(differ, ", "),
        " run with other options than"
        " worker ",
        me,
        " (loss, C, eps, bias, elimination, max_passes, seed, "
        "combine, workers and features must be the same everywhere)"));
  }

  const int dim = WeightSize(local, o.dcd);
  const bool average = o.combine == Combine::kAverage;
  const double sigma = average ? 1.0 : static_cast<double>(w_count);
  const double gamma = average ? 1.0 / w_count : 1.0;
  const size_t slots = static_cast<size_t>(dim);
  std::vector<double> message(slots + 2 * w_count + 4);
  std::vector<double> w_local(dim);

  CocoaResult result;
  result.w.assign(dim, 0.0);
  LocalDcd dcd(local, o.dcd, static_cast<uint64_t>(me));
  const auto failed = [&](const absl::Status& why, absl::string_view what) {
    if (o.alpha_on_failure != nullptr) *o.alpha_on_failure = dcd.alpha();
    return Annotate(why, what);
  };
  if (o.warm_start) {
    if (o.initial_alpha.size() != static_cast<size_t>(local.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("a warm start of ", o.initial_alpha.size(),
                       " values for ", local.size(), " samples"));
    }
    dcd.SetAlpha(o.initial_alpha);
    // w = sum_i a_i y_i x_i, every worker's samples.
    const std::vector<double>& a = dcd.alpha();
    const int d = local.features;
    for (int64_t i = 0; i < local.size(); ++i) {
      if (a[i] == 0) continue;
      const double ay = a[i] * local.y[i];
      const float* x = local.x.data() + i * d;
      for (int j = 0; j < d; ++j) result.w[j] += ay * x[j];
      if (o.dcd.bias > 0) result.w[d] += ay * o.dcd.bias;
    }
    status = all_reduce(absl::MakeSpan(result.w));
    if (!status.ok()) return failed(status, "summing w of the warm start");
  }
  for (int round = 1; round <= o.dcd.max_passes; ++round) {
    std::fill(message.begin(), message.end(), 0.0);
    w_local = result.w;
    const PassStats pass = dcd.Pass(round, absl::MakeSpan(w_local), sigma,
                                    absl::MakeSpan(message.data(), slots));
    message[slots + me] = Encode(pass.pg_max);
    message[slots + w_count + me] = Encode(pass.pg_min);
    message[slots + 2 * w_count] = static_cast<double>(pass.touched);
    message[slots + 2 * w_count + 1] = static_cast<double>(pass.dropped);
    message[slots + 2 * w_count + 2] = static_cast<double>(pass.inactive);
    message[slots + 2 * w_count + 3] = static_cast<double>(local.size());
    status = all_reduce(absl::MakeSpan(message));
    if (!status.ok()) {
      return failed(status, absl::StrCat("combining round ", round));
    }
    for (int j = 0; j < dim; ++j) result.w[j] += gamma * message[j];
    if (average) dcd.ScaleLastPass(gamma);

    RoundStats stats;
    stats.pass.pass = round;
    for (int k = 0; k < w_count; ++k) {
      stats.pass.pg_max =
          std::max(stats.pass.pg_max, Decode(message[slots + k]));
      stats.pass.pg_min =
          std::min(stats.pass.pg_min, Decode(message[slots + w_count + k]));
    }
    stats.pass.touched = std::llround(message[slots + 2 * w_count]);
    stats.pass.dropped = std::llround(message[slots + 2 * w_count + 1]);
    stats.pass.inactive = std::llround(message[slots + 2 * w_count + 2]);
    const ShrinkDecision decision =
        DecideAfterPass(stats.pass.pg_max, stats.pass.pg_min,
                        stats.pass.inactive > 0, o.dcd.eps);
    stats.pass.restored = decision.restore;
    dcd.Apply(decision, round);
    const int64_t samples = std::llround(message[slots + 2 * w_count + 3]);
    stats.active_after =
        decision.restore ? samples : samples - stats.pass.inactive;
    result.passes = round;
    result.touched += stats.pass.touched;
    result.history.push_back(stats);
    if (o.on_round) o.on_round(stats);
    if (decision.stop) {
      result.converged = true;
      break;
    }
  }

  // The objectives at the final (w, a): the loss and the a terms are sums
  // over the workers' samples; one more all-reduce on every worker.
  double sum = 0, squares = 0;
  for (double a : dcd.alpha()) {
    sum += a;
    squares += a * a;
  }
  std::vector<double> terms = {LossSum(local, o.dcd, result.w), sum, squares};
  status = all_reduce(absl::MakeSpan(terms));
  if (!status.ok()) return failed(status, "summing the final objective");
  double ww = 0;
  for (double v : result.w) ww += v * v;
  result.primal = 0.5 * ww + o.dcd.c * terms[0];
  result.dual = 0.5 * ww + 0.5 * DiagonalShift(o.dcd) * terms[2] - terms[1];
  result.alpha = dcd.alpha();
  result.events = dcd.events();
  return result;
}

InProcessAllReduce::InProcessAllReduce(int workers, absl::Duration timeout)
    : workers_(workers),
      timeout_(timeout),
      inputs_(workers),
      arrived_(workers, false) {}

int64_t InProcessAllReduce::calls() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(generation_);
}

absl::Status InProcessAllReduce::Reduce(int worker, absl::Span<double> data) {
  absl::MutexLock lock(&mu_);
  if (worker < 0 || worker >= workers_ || arrived_[worker]) {
    return absl::InvalidArgumentError(
        absl::StrCat("in-process all-reduce: worker ", worker, " of ", workers_,
                     " is out of range or already waiting"));
  }
  for (int k = 0; k < workers_; ++k) {
    if (arrived_[k] && inputs_[k].size() != data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "in-process all-reduce ", generation_, ": worker ", worker, " sends ",
          data.size(), " elements, worker ", k, " ", inputs_[k].size()));
    }
  }
  inputs_[worker].assign(data.begin(), data.end());
  arrived_[worker] = true;
  const uint64_t generation = generation_;
  if (++arrivals_ == workers_) {
    sum_.assign(data.size(), 0.0);
    for (int k = 0; k < workers_; ++k) {
      for (size_t j = 0; j < sum_.size(); ++j) sum_[j] += inputs_[k][j];
      arrived_[k] = false;
    }
    arrivals_ = 0;
    ++generation_;
    done_.SignalAll();
  } else {
    const absl::Time deadline = absl::Now() + timeout_;
    while (generation_ == generation) {
      if (done_.WaitWithDeadline(&mu_, deadline) && generation_ == generation) {
        std::vector<std::string> missing;
        for (int k = 0; k < workers_; ++k) {
          if (!arrived_[k]) missing.push_back(absl::StrCat(k));
        }
        return absl::DeadlineExceededError(absl::StrCat(
            "in-process all-reduce ", generation, ": workers ",
            absl::StrJoin(missing, ", "), " did not arrive within ",
            absl::FormatDuration(timeout_)));
      }
    }
  }
  std::copy(sum_.begin(), sum_.end(), data.begin());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CocoaResult>> SimulateCocoa(
    const std::vector<Problem>& parts, const CocoaOptions& options,
    absl::Duration timeout) {
  const int w_count = static_cast<int>(parts.size());
  if (w_count < 1) {
    return absl::InvalidArgumentError("simulated workers: need at least one");
  }
  // Checked here too: a worker that failed alone would leave the others
  // waiting in the all-reduce until `timeout`.
  for (int k = 0; k < w_count; ++k) {
    absl::Status status = ValidateProblem(parts[k]);
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("simulated worker ", k,
                                                      ": ", status.message()));
    }
  }
  absl::Status status = ValidateOptions(options.dcd);
  if (!status.ok()) return status;
  InProcessAllReduce reducer(w_count, timeout);
  std::vector<absl::StatusOr<CocoaResult>> results(
      w_count, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int k = 0; k < w_count; ++k) {
    threads.emplace_back([&, k] {
      CocoaOptions mine = options;
      mine.workers = w_count;
      mine.worker_id = k;
      if (k != 0) mine.on_round = nullptr;  // one progress report
      results[k] = RunCocoaWorker(parts[k], mine,
                                  [&reducer, k](absl::Span<double> data) {
                                    return reducer.Reduce(k, data);
                                  });
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<CocoaResult> out;
  for (int k = 0; k < w_count; ++k) {
    if (!results[k].ok()) {
      return absl::Status(results[k].status().code(),
                          absl::StrCat("simulated worker ", k, " of ", w_count,
                                       ": ", results[k].status().message()));
    }
    out.push_back(*std::move(results[k]));
  }
  return out;
}

}  // namespace svm
}  // namespace starling
