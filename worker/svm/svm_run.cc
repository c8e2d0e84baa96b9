// A starling-svm worker: data, combine (local threads or Client), report.
#include "worker/svm/svm_run.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/client.h"

namespace starling {
namespace svm {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

absl::Status WithContext(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

// The combine over Client::AllReduce: doubles travel as float32 through a
// buffer in the client's pool (AllReduce refuses others), in pieces of the
// buffer's length (a round's message is one).
class ClientAllReduce {
 public:
  // Borrows `client`; `buffer` is in its pool.
  ClientAllReduce(client::Client* client, absl::Span<float> buffer)
      : client_(client), buffer_(buffer) {}

  absl::Status operator()(absl::Span<double> data) {
    if (buffer_.empty() && !data.empty()) {
      return absl::InternalError("all-reduce with no pool buffer");
    }
    for (size_t begin = 0; begin < data.size(); begin += buffer_.size()) {
      const size_t n = std::min(buffer_.size(), data.size() - begin);
      absl::Span<float> part = buffer_.subspan(0, n);
      for (size_t i = 0; i < n; ++i) {
        part[i] = static_cast<float>(data[begin + i]);
      }
      absl::Status status = client_->AllReduce(part);
      if (!status.ok()) return status;
      for (size_t i = 0; i < n; ++i) data[begin + i] = part[i];
    }
    return absl::OkStatus();
  }

 private:
  client::Client* client_;
  absl::Span<float> buffer_;
};

// Per-pass lines on `progress` and rows in `csv` (either may be null).
class PassReporter {
 public:
  PassReporter(std::FILE* progress, std::FILE* csv, int every, Task task)
      : progress_(progress), csv_(csv), every_(every), task_(task) {}

  void Report(int positive_class, const RoundStats& s) {
    const PassStats& p = s.pass;
    if (progress_ != nullptr && every_ > 0 &&
        (p.pass % every_ == 0 || p.restored || p.pass == 1)) {
      std::fprintf(progress_,
                   "pass %d class %d: touched %lld dropped %lld out %lld "
                   "next %lld violation %.6g%s\n",
                   p.pass, positive_class, static_cast<long long>(p.touched),
                   static_cast<long long>(p.dropped),
                   static_cast<long long>(p.inactive),
                   static_cast<long long>(s.active_after), p.violation(),
                   p.restored ? " (all samples restored)" : "");
      std::fflush(progress_);
    }
    if (csv_ != nullptr) {
      std::fprintf(csv_, "%s,%d,%d,%lld,%lld,%lld,%lld,%.9g,%.9g,%.9g,%d\n",
                   TaskName(task_), positive_class, p.pass,
                   static_cast<long long>(p.touched),
                   static_cast<long long>(p.dropped),
                   static_cast<long long>(p.inactive),
                   static_cast<long long>(s.active_after), p.pg_max, p.pg_min,
                   p.violation(), p.restored ? 1 : 0);
    }
  }

 private:
  std::FILE* progress_;
  std::FILE* csv_;
  const int every_;
  const Task task_;
};

// Client mode: how the solve stands across a re-formation.
struct GoingOn {
  int workers = 1;
  int worker_id = 0;
  absl::Span<float> buffer;  // the combine's (and the pieces') pool buffer
  // Per class solved or under way: a over every training sample (global
  // index), this worker's entries set (those of worker_id of workers).
  std::vector<std::vector<double>> alpha;
};

// The first collectives of every worker in a re-formed group: the class
// each is on (the group goes on with the first one some worker has not
// finished), then that class's a, each worker's own entries summed into
// one vector (a lost worker's stay 0). Sets *klass; `going` takes the new
// group's worker count and id.
absl::Status GoOnInNewGroup(client::Client* client, size_t dim,
                            int64_t train_samples, GoingOn* going, int* klass,
                            int64_t* uncovered) {
  const int old_workers = going->workers;
  const int old_id = going->worker_id;
  going->workers = client->group_size() * client->local_workers();
  going->worker_id =
      client->rank() * client->local_workers() + client->worker_index();
  absl::StatusOr<absl::Span<float>> buffer = client->Allocate(
      std::max<size_t>(dim + 2 * going->workers + 4, size_t{1} << 14));
  if (!buffer.ok()) {
    return WithContext(buffer.status(), "allocating the message");
  }
  going->buffer = *buffer;
  // [0, W): slot k the class worker k is on; W: the samples held.
  std::vector<double> where(going->workers + 1, 0.0);
  where[going->worker_id] = *klass;
  int64_t held = 0;
  for (int64_t g = old_id; g < train_samples; g += old_workers) ++held;
  where[going->workers] = static_cast<double>(held);
  ClientAllReduce sum(client, going->buffer);
  absl::Status status = sum(absl::MakeSpan(where));
  if (!status.ok()) return status;
  int first = *klass;
  for (int k = 0; k < going->workers; ++k) {
    first = std::min(first, static_cast<int>(std::llround(where[k])));
  }
  *klass = first;
  *uncovered = train_samples - std::llround(where[going->workers]);
  going->alpha.resize(first + 1);
  std::vector<double>& alpha = going->alpha[first];
  alpha.resize(train_samples, 0.0);
  // Only this worker's entries: the others' are theirs to give.
  for (int64_t g = 0; g < train_samples; ++g) {
    if (g % old_workers != old_id) alpha[g] = 0.0;
  }
  return sum(absl::MakeSpan(alpha));
}

absl::Status WriteWeights(const std::string& path, const LinearModel& model) {
  File f(std::fopen(path.c_str(), "wb"));
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create --out file ", path, ": ", std::strerror(errno)));
  }
  for (const std::vector<double>& w : model.w) {
    if (std::fwrite(w.data(), sizeof(double), w.size(), f.get()) != w.size()) {
      return absl::DataLossError(
          absl::StrCat("writing ", path, " failed: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SvmRunReport> RunSvm(const SvmRunOptions& o,
                                    std::FILE* progress) {
  absl::Status status = ValidateOptions(o.dcd);
  if (!status.ok()) return status;
  if (o.socket_path.empty() && o.workers_simulated < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workers_simulated must be >= 1, got ", o.workers_simulated));
  }
  if (o.data_dir.empty()) {
    return absl::InvalidArgumentError("data_dir must not be empty");
  }
  SvmRunReport report;
  std::unique_ptr<client::Client> client;
  absl::Span<float> buffer;
  if (!o.socket_path.empty()) {
    client::ClientOptions co;
    co.socket_path = o.socket_path;
    co.worker_index = o.worker_index;
    co.timeout = o.timeout;
    co.pool_bytes = size_t{4} << 20;
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Connect(co);
    if (!c.ok()) {
      return WithContext(c.status(),
                         absl::StrCat("connecting to ", o.socket_path));
    }
    client = *std::move(c);
    report.workers = client->group_size() * client->local_workers();
    report.worker_id =
        client->rank() * client->local_workers() + client->worker_index();
  } else {
    report.workers = o.workers_simulated;
  }

  const absl::Time load_start = absl::Now();
  absl::StatusOr<LabeledImages> train =
      LoadTaskImages(o.data_dir, "train", o.task, o.train_limit);
  if (!train.ok()) return WithContext(train.status(), "loading --train");
  absl::StatusOr<LabeledImages> test =
      LoadTaskImages(o.data_dir, "test", o.task, o.test_limit);
  if (!test.ok()) return WithContext(test.status(), "loading --test");
  report.train_samples = train->size();
  report.test_samples = test->size();
  if (train->size() < report.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat(train->size(), " training samples for ", report.workers,
                     " workers: each worker needs at least one"));
  }
  // This process's parts: every simulated worker's, or its own.
  std::vector<LabeledImages> parts;
  if (client == nullptr) {
    for (int k = 0; k < report.workers; ++k) {
      parts.push_back(StridedPart(*train, report.workers, k));
    }
  } else {
    parts.push_back(StridedPart(*train, report.workers, report.worker_id));
  }
  // The parts hold what is needed, but for dealing the samples again after
  // a re-formation (client mode).
  if (client == nullptr) train = LabeledImages();
  report.load_time = absl::Now() - load_start;

  const std::vector<int> classes = PositiveClasses(o.task);
  Problem shape;
  shape.features = parts[0].features;
  const int dim = WeightSize(shape, o.dcd);
  if (client != nullptr) {
    status = client->DeclareTensor("svm.w",
                                   {static_cast<int64_t>(classes.size()), dim},
                                   client::DataType::kFloat32);
    if (!status.ok()) return WithContext(status, "declaring svm.w");
    absl::StatusOr<absl::Span<float>> b =
        client->Allocate(static_cast<size_t>(dim) + 2 * report.workers + 4);
    if (!b.ok()) return WithContext(b.status(), "allocating the message");
    buffer = *b;
  }

  File csv;
  if (!o.csv_path.empty() && report.worker_id == 0) {
    csv.reset(std::fopen(o.csv_path.c_str(), "w"));
    if (csv == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot create --csv file ", o.csv_path, ": ", std::strerror(errno)));
    }
    std::fprintf(csv.get(),
                 "task,class,pass,touched,dropped,inactive,active_after,"
                 "pg_max,pg_min,violation,restored\n");
  }
  PassReporter reporter(report.worker_id == 0 ? progress : nullptr, csv.get(),
                        o.progress_every, o.task);

  report.model.task = o.task;
  report.model.options = o.dcd;
  report.model.positive_classes = classes;
  const absl::Time solve_start = absl::Now();
  // Each class's solve; client mode goes back to the first class some worker
  // had not finished when a re-formed group goes on.
  struct Solved {
    int passes = 0;
    int64_t touched = 0;
    bool converged = false;
    double primal = 0, dual = 0;
    std::vector<double> w;
  };
  std::vector<Solved> solved;
  GoingOn going;
  going.workers = report.workers;
  going.worker_id = report.worker_id;
  going.buffer = buffer;
  int rejoins_left = o.rejoins;
  bool warm = false;
  int klass = 0;
  while (klass < static_cast<int>(classes.size())) {
    const int positive = classes[klass];
    std::vector<std::vector<int8_t>> labels;
    std::vector<Problem> problems;
    for (const LabeledImages& part : parts) {
      labels.push_back(SignLabels(part.labels, positive));
    }
    for (size_t k = 0; k < parts.size(); ++k) {
      problems.push_back(MakeProblem(parts[k], labels[k]));
    }
    CocoaOptions co;
    co.dcd = o.dcd;
    co.combine = o.combine;
    co.workers = report.workers;
    co.worker_id = report.worker_id;
    co.on_round = [&reporter, positive](const RoundStats& s) {
      reporter.Report(positive, s);
    };
    // Client mode: this worker's a where a solve stops early.
    std::vector<double> left;
    absl::StatusOr<CocoaResult> result;
    if (client == nullptr) {
      absl::StatusOr<std::vector<CocoaResult>> all =
          SimulateCocoa(problems, co, o.timeout);
      if (all.ok()) {
        result = std::move((*all)[0]);
      } else {
        result = all.status();
      }
    } else {
      if (warm) {
        co.warm_start = true;
        const std::vector<double>& alpha = going.alpha[klass];
        for (size_t g = going.worker_id; g < alpha.size(); g += going.workers) {
          co.initial_alpha.push_back(alpha[g]);
        }
        left = co.initial_alpha;
      } else {
        left.assign(problems[0].size(), 0.0);
      }
      co.alpha_on_failure = &left;
      result = RunCocoaWorker(problems[0], co,
                              ClientAllReduce(client.get(), going.buffer));
    }
    const std::string what =
        absl::StrCat("solving class ", positive, " of task ", TaskName(o.task));
    // This worker's a of the class, at its global sample indices.
    const auto keep = [&](const std::vector<double>& local) {
      going.alpha.resize(std::max<size_t>(going.alpha.size(), klass + 1));
      std::vector<double>& alpha = going.alpha[klass];
      alpha.resize(train->size(), 0.0);
      for (size_t j = 0; j < local.size(); ++j) {
        alpha[going.worker_id + j * going.workers] = local[j];
      }
    };
    if (result.ok()) {
      if (client != nullptr) keep(result->alpha);
      Solved done;
      done.passes = result->passes;
      done.touched = result->touched;
      done.converged = result->converged;
      done.primal = result->primal;
      done.dual = result->dual;
      done.w = std::move(result->w);
      solved.push_back(std::move(done));
      ++klass;
      warm = false;
      continue;
    }
    const auto rejoinable = [](const absl::Status& s) {
      return absl::IsAborted(s) || absl::IsUnavailable(s);
    };
    absl::Status failed = result.status();
    if (client == nullptr || !rejoinable(failed) || rejoins_left <= 0) {
      return WithContext(failed, what);
    }
    keep(left);
    // Rejoin the re-formed group (again, if it re-forms meanwhile).
    int64_t uncovered = 0;
    while (true) {
      --rejoins_left;
      std::printf("starling-svm: %s: %s; rejoining the re-formed group\n",
                  what.c_str(), std::string(failed.message()).c_str());
      std::fflush(stdout);
      absl::StatusOr<client::Client::Rejoined> rejoined = client->Rejoin();
      if (!rejoined.ok()) {
        return WithContext(
            rejoined.status(),
            absl::StrCat(what, ": rejoining after \"", failed.message(), "\""));
      }
      failed = GoOnInNewGroup(client.get(), static_cast<size_t>(dim),
                              train->size(), &going, &klass, &uncovered);
      if (failed.ok()) break;
      if (!rejoinable(failed) || rejoins_left <= 0) {
        return WithContext(failed, absl::StrCat(what, ": going on"));
      }
    }
    ++report.rejoins;
    solved.resize(klass);
    warm = true;
    report.workers = going.workers;
    report.worker_id = going.worker_id;
    parts[0] = StridedPart(*train, report.workers, report.worker_id);
    std::printf(
        "starling-svm: rejoined as worker %d of %d; class %d goes on from "
        "the a the workers held, the samples dealt again (%lld of lost "
        "workers from a = 0)\n",
        report.worker_id, report.workers, classes[klass],
        static_cast<long long>(uncovered));  // NOLINT(runtime/int)
    std::fflush(stdout);
  }
  for (Solved& done : solved) {
    report.passes += done.passes;
    report.touched += done.touched;
    report.converged = report.converged && done.converged;
    report.primal += done.primal;
    report.dual += done.dual;
    report.model.w.push_back(std::move(done.w));
  }
  report.solve_time = absl::Now() - solve_start;
  report.accuracy = Accuracy(report.model, *test);
  if (!o.out_path.empty()) {
    status = WriteWeights(o.out_path, report.model);
    if (!status.ok()) return status;
  }
  if (client != nullptr) {
    status = client->Finish();
    if (!status.ok()) return WithContext(status, "finishing the run");
  }
  return report;
}

std::string FormatSummary(const SvmRunOptions& o, const SvmRunReport& r) {
  return absl::StrFormat(
      "starling-svm: done task=%s loss=%s C=%g eps=%g bias=%g elimination=%s "
      "combine=%s workers=%d worker=%d train=%d test=%d passes=%d "
      "touched=%d accuracy=%.4f primal=%.6g dual=%.6g gap=%.3g "
      "converged=%d load_s=%.3f solve_s=%.3f",
      TaskName(o.task), LossName(o.dcd.loss), o.dcd.c, o.dcd.eps, o.dcd.bias,
      o.dcd.elimination ? "on" : "off", CombineName(o.combine), r.workers,
      r.worker_id, r.train_samples, r.test_samples, r.passes, r.touched,
      r.accuracy, r.primal, r.dual, r.primal + r.dual, r.converged ? 1 : 0,
      absl::ToDoubleSeconds(r.load_time), absl::ToDoubleSeconds(r.solve_time));
}

}  // namespace svm
}  // namespace starling
