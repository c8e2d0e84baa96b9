// A starling-svm worker: data, combine (local threads or Client), report.
#include "worker/svm/svm_run.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

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
// buffer in the client's pool (AllReduce refuses others).
class ClientAllReduce {
 public:
  // Borrows `client`; `buffer` (in its pool) bounds the message length.
  ClientAllReduce(client::Client* client, absl::Span<float> buffer)
      : client_(client), buffer_(buffer) {}

  absl::Status operator()(absl::Span<double> data) {
    if (data.size() > buffer_.size()) {
      return absl::InternalError(absl::StrCat("all-reduce of ", data.size(),
                                              " elements; the pool "
                                              "buffer holds ",
                                              buffer_.size()));
    }
    absl::Span<float> part = buffer_.subspan(0, data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      part[i] = static_cast<float>(data[i]);
    }
    absl::Status status = client_->AllReduce(part);
    if (!status.ok()) return status;
    for (size_t i = 0; i < data.size(); ++i) data[i] = part[i];
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
  train = LabeledImages();  // the parts hold what is needed
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
  for (int positive : classes) {
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
      result = RunCocoaWorker(problems[0], co,
                              ClientAllReduce(client.get(), buffer));
    }
    if (!result.ok()) {
      return WithContext(result.status(),
                         absl::StrCat("solving class ", positive, " of task ",
                                      TaskName(o.task)));
    }
    report.passes += result->passes;
    report.touched += result->touched;
    report.converged = report.converged && result->converged;
    report.primal += result->primal;
    report.dual += result->dual;
    report.model.w.push_back(std::move(result->w));
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
