// starling-svm: a linear SVM (L1 or L2 loss, dual coordinate descent with
// sample elimination) on Fashion-MNIST, data-parallel over a Starling job
// (CoCoA+ rounds combined with Client::AllReduce) or in one process.
//
//   # one worker of a job (coordinator started with --optimizer none):
//   starling-svm --socket=/run/starling/node.sock --worker_index=0
//       --task=tshirt_shirt --loss=l1 --C=0.1
//   # no daemon: 1 (plain DCD) or N simulated workers
//   starling-svm --local --workers_simulated=4 --task=ovr
//   # the same data as LIBSVM text, for liblinear-train
//   starling-svm --write_libsvm=/tmp/svm --task=ovr --train_limit=5000
//
// Exit codes: 0 on success; 1 on any error, with one line
// "starling-svm: <what failed>: <why>" on stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/base/command_line.h"
#include "server/base/version.h"
#include "server/base/worker_socket.h"
#include "worker/svm/cocoa.h"
#include "worker/svm/dcd.h"
#include "worker/svm/svm_data.h"
#include "worker/svm/svm_run.h"
#include "worker/train/idx.h"

ABSL_FLAG(std::string, socket, starling::kDefaultWorkerSocket,
          "the local starling-node's --worker_socket (ignored with --local)");
ABSL_FLAG(int, worker_index, 0,
          "this worker's index on its daemon, 0 .. --local_workers - 1");
ABSL_FLAG(bool, local, false,
          "run without a daemon: --workers_simulated workers in this process");
ABSL_FLAG(int, workers_simulated, 1,
          "--local only: simulated workers (threads; 1 = plain DCD)");
ABSL_FLAG(std::string, task, "tshirt_shirt",
          "tshirt_shirt (class 0 vs 6), sandal_sneaker (5 vs 7) or ovr "
          "(10-class one-vs-rest)");
ABSL_FLAG(std::string, loss, "l1",
          "l1 (hinge, LIBLINEAR -s 3) or l2 (squared hinge, -s 1)");
ABSL_FLAG(double, C, 0.1, "regularisation parameter C (> 0)");
ABSL_FLAG(double, eps, 0.1,
          "stop when the projected-gradient violation PGmax - PGmin over all "
          "samples is <= eps (LIBLINEAR -e)");
ABSL_FLAG(double, bias, 1.0,
          "value of the constant extra feature (LIBLINEAR -B); <= 0: none");
ABSL_FLAG(std::string, elimination, "on",
          "on or off: adaptive sample elimination (shrinking)");
ABSL_FLAG(std::string, combine, "add",
          "add (CoCoA+, sigma' = workers) or average (CoCoA; see cocoa.h: it "
          "does not meet --eps and runs to --max_passes)");
ABSL_FLAG(int, max_passes, 1000, "passes (rounds) per binary problem, >= 1");
ABSL_FLAG(uint64_t, seed, 1, "seed of the passes' sample orders");
ABSL_FLAG(std::string, data_dir,
          std::string(starling::train::kDefaultFashionMnistDir),
          "directory of the Fashion-MNIST idx files (Debian's "
          "dataset-fashion-mnist)");
ABSL_FLAG(int64_t, train_limit, 0,
          "use only the first N training samples of the task's classes; 0 = "
          "all");
ABSL_FLAG(int64_t, test_limit, 0,
          "use only the first N test samples of the task's classes; 0 = all");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "bound on connecting and on each all-reduce (> 0)");
ABSL_FLAG(int, rejoins, 3,
          "when a daemon of the group is lost and the run goes on in the "
          "re-formed group, rejoin it up to this many times (0: end with the "
          "error); the class under way goes on from the a the workers held");
ABSL_FLAG(int, progress_every, 1,
          "print a progress line every N passes (worker 0); 0 = none");
ABSL_FLAG(std::string, csv, "",
          "optional CSV file: one row per pass (worker 0)");
ABSL_FLAG(std::string, out, "",
          "optional file: the final weights, float64 little-endian, one "
          "vector (features + bias) per binary problem");
ABSL_FLAG(std::string, write_libsvm, "",
          "write DIR/train.svm and DIR/test.svm (LIBSVM text of the same "
          "samples) and exit without training");

namespace starling {
namespace svm {
namespace {

int Fail(const std::string& what, absl::string_view why) {
  std::fflush(stdout);
  std::fprintf(stderr, "starling-svm: %s: %s\n", what.c_str(),
               std::string(why).c_str());
  return 1;
}

int WriteLibsvmFiles(const SvmRunOptions& o, const std::string& dir) {
  for (const char* split : {"train", "test"}) {
    absl::StatusOr<LabeledImages> images = LoadTaskImages(
        o.data_dir, split, o.task,
        std::string(split) == "train" ? o.train_limit : o.test_limit);
    if (!images.ok()) {
      return Fail(absl::StrCat("loading ", split), images.status().message());
    }
    const std::string path = absl::StrCat(dir, "/", split, ".svm");
    absl::Status status = WriteLibsvm(path, *images, o.task);
    if (!status.ok()) return Fail("--write_libsvm", status.message());
    std::printf("starling-svm: wrote %s (%lld samples)\n", path.c_str(),
                static_cast<long long>(images->size()));
  }
  return 0;
}

int Main(int argc, char** argv) {
  StartProgram(
      {"starling-svm", "worker/svm/main.cc", kStarlingVersion,
       "a data-parallel linear SVM (dual coordinate descent with sample "
       "elimination, CoCoA+ across workers) on Fashion-MNIST"},
      argc, argv);

  SvmRunOptions o;
  absl::StatusOr<Task> task = ParseTask(absl::GetFlag(FLAGS_task));
  if (!task.ok()) return Fail("--task", task.status().message());
  o.task = *task;
  absl::StatusOr<Loss> loss = ParseLoss(absl::GetFlag(FLAGS_loss));
  if (!loss.ok()) return Fail("--loss", loss.status().message());
  o.dcd.loss = *loss;
  absl::StatusOr<Combine> combine = ParseCombine(absl::GetFlag(FLAGS_combine));
  if (!combine.ok()) return Fail("--combine", combine.status().message());
  o.combine = *combine;
  const std::string elimination = absl::GetFlag(FLAGS_elimination);
  if (elimination != "on" && elimination != "off") {
    return Fail("--elimination",
                absl::StrCat("\"", elimination, "\": expected on or off"));
  }
  o.dcd.elimination = elimination == "on";
  o.dcd.c = absl::GetFlag(FLAGS_C);
  o.dcd.eps = absl::GetFlag(FLAGS_eps);
  o.dcd.bias = absl::GetFlag(FLAGS_bias);
  o.dcd.max_passes = absl::GetFlag(FLAGS_max_passes);
  o.dcd.seed = absl::GetFlag(FLAGS_seed);
  const absl::Status valid = ValidateOptions(o.dcd);
  if (!valid.ok()) {
    // "C must be ..." -> "--C", and so on.
    const std::string message(valid.message());
    const std::string flag = message.substr(0, message.find(' '));
    return Fail(absl::StrCat("--", flag), message);
  }
  const bool local = absl::GetFlag(FLAGS_local);
  o.workers_simulated = absl::GetFlag(FLAGS_workers_simulated);
  if (o.workers_simulated < 1 || o.workers_simulated > 1024) {
    return Fail("--workers_simulated",
                absl::StrCat("must be in 1..1024, got ", o.workers_simulated));
  }
  if (!local) {
    o.socket_path = absl::GetFlag(FLAGS_socket);
    if (o.socket_path.empty()) {
      return Fail("--socket", "must not be empty (or pass --local)");
    }
    if (o.workers_simulated != 1) {
      return Fail("--workers_simulated", "needs --local");
    }
  }
  o.worker_index = absl::GetFlag(FLAGS_worker_index);
  if (o.worker_index < 0) {
    return Fail("--worker_index",
                absl::StrCat("must be >= 0, got ", o.worker_index));
  }
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (o.data_dir.empty()) return Fail("--data_dir", "must not be empty");
  o.train_limit = absl::GetFlag(FLAGS_train_limit);
  if (o.train_limit < 0) {
    return Fail("--train_limit",
                absl::StrCat("must be >= 0 (0 = all), got ", o.train_limit));
  }
  o.test_limit = absl::GetFlag(FLAGS_test_limit);
  if (o.test_limit < 0) {
    return Fail("--test_limit",
                absl::StrCat("must be >= 0 (0 = all), got ", o.test_limit));
  }
  o.timeout = absl::GetFlag(FLAGS_timeout);
  if (o.timeout <= absl::ZeroDuration()) {
    return Fail("--timeout", absl::StrCat("must be > 0, got ",
                                          absl::FormatDuration(o.timeout)));
  }
  o.rejoins = absl::GetFlag(FLAGS_rejoins);
  if (o.rejoins < 0) {
    return Fail("--rejoins", absl::StrCat("must be >= 0, got ", o.rejoins));
  }
  o.progress_every = absl::GetFlag(FLAGS_progress_every);
  if (o.progress_every < 0) {
    return Fail("--progress_every",
                absl::StrCat("must be >= 0, got ", o.progress_every));
  }
  o.csv_path = absl::GetFlag(FLAGS_csv);
  o.out_path = absl::GetFlag(FLAGS_out);

  const std::string libsvm_dir = absl::GetFlag(FLAGS_write_libsvm);
  if (!libsvm_dir.empty()) return WriteLibsvmFiles(o, libsvm_dir);

  absl::StatusOr<SvmRunReport> report = RunSvm(o, stdout);
  if (!report.ok()) return Fail("training", report.status().message());
  std::printf("%s\n", FormatSummary(o, *report).c_str());
  return 0;
}

}  // namespace
}  // namespace svm
}  // namespace starling

int main(int argc, char** argv) { return starling::svm::Main(argc, argv); }
