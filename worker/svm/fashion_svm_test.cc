// starling-svm's solver on Fashion-MNIST subsets, in one process:
// elimination keeps the accuracy and saves visits, W = 4 simulated
// workers match one, and (with liblinear-tools) LIBLINEAR agrees.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/svm/svm_data.h"
#include "worker/svm/svm_run.h"
#include "worker/train/idx.h"

namespace starling {
namespace svm {
namespace {

const std::string kDir(train::kDefaultFashionMnistDir);

bool HaveData() {
  struct stat st;
  return ::stat((kDir + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

#define REQUIRE_DATA()                                         \
  if (!HaveData()) {                                           \
    GTEST_SKIP() << kDir                                       \
                 << " has no Fashion-MNIST: install Debian's " \
                    "dataset-fashion-mnist (deploy/setup.sh)"; \
  }

SvmRunOptions Subset(Task task, Loss loss) {
  SvmRunOptions o;
  o.task = task;
  o.dcd.loss = loss;
  o.dcd.c = 0.1;
  o.dcd.eps = 0.1;
  o.data_dir = kDir;
  o.train_limit = 2500;
  o.test_limit = 1000;
  o.progress_every = 0;
  return o;
}

SvmRunReport Solve(const SvmRunOptions& o) {
  absl::StatusOr<SvmRunReport> r = RunSvm(o, nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return SvmRunReport();
  EXPECT_TRUE(r->converged) << FormatSummary(o, *r);
  return *r;
}

// Elimination on vs off: the same accuracy within 0.5 point, and at least
// 30% fewer samples touched (we see 50-80%), except tshirt_shirt with the
// squared hinge: most of its samples stay support vectors, so few can be
// dropped (15-25% fewer; tests/bench/SVM.md); there strictly fewer.
TEST(FashionSvm, EliminationKeepsAccuracyWithFewerVisits) {
  REQUIRE_DATA();
  for (Task task : {Task::kTShirtShirt, Task::kSandalSneaker}) {
    for (Loss loss : {Loss::kL1, Loss::kL2}) {
      SvmRunOptions o = Subset(task, loss);
      o.dcd.elimination = false;
      const SvmRunReport off = Solve(o);
      o.dcd.elimination = true;
      const SvmRunReport on = Solve(o);
      const std::string what =
          absl::StrCat(TaskName(task), " ", LossName(loss));
      EXPECT_NEAR(on.accuracy, off.accuracy, 0.005) << what;
      const bool hard = task == Task::kTShirtShirt && loss == Loss::kL2;
      EXPECT_LE(static_cast<double>(on.touched),
                (hard ? 1.0 : 0.7) * off.touched)
          << what << ": " << on.touched << " vs " << off.touched;
      EXPECT_LT(on.touched, off.touched) << what;
      EXPECT_GT(on.accuracy, task == Task::kSandalSneaker ? 0.9 : 0.75) << what;
    }
  }
}

TEST(FashionSvm, FourSimulatedWorkersMatchOne) {
  REQUIRE_DATA();
  SvmRunOptions o = Subset(Task::kTShirtShirt, Loss::kL1);
  o.dcd.max_passes = 5000;
  const SvmRunReport one = Solve(o);
  o.workers_simulated = 4;
  const SvmRunReport four = Solve(o);
  EXPECT_EQ(four.workers, 4);
  EXPECT_NEAR(four.accuracy, one.accuracy, 0.01);
  // Both solved the same problem to eps: the primal values agree closely.
  EXPECT_NEAR(four.primal, one.primal, 0.01 * one.primal);
}

TEST(FashionSvm, OneVsRestPredictsTenClasses) {
  REQUIRE_DATA();
  SvmRunOptions o = Subset(Task::kOneVsRest, Loss::kL2);
  o.train_limit = 2500;
  const SvmRunReport r = Solve(o);
  EXPECT_EQ(r.model.w.size(), 10u);
  EXPECT_GT(r.accuracy, 0.72);
}

// Runs `command`; its stdout.
std::string Output(const std::string& command) {
  std::string out;
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    out.append(buffer, n);
  }
  ::pclose(pipe);
  return out;
}

double After(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  if (at == std::string::npos) return NAN;
  return std::atof(text.c_str() + at + key.size());
}

TEST(FashionSvm, AgreesWithLiblinearOnTheSameData) {
  REQUIRE_DATA();
  struct stat st;
  if (::stat("/usr/bin/liblinear-train", &st) != 0) {
    GTEST_SKIP() << "no /usr/bin/liblinear-train: install Debian's "
                    "liblinear-tools to compare with LIBLINEAR";
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  for (Loss loss : {Loss::kL1, Loss::kL2}) {
    SvmRunOptions o = Subset(Task::kTShirtShirt, loss);
    const SvmRunReport ours = Solve(o);
    for (const char* split : {"train", "test"}) {
      absl::StatusOr<LabeledImages> images = LoadTaskImages(
          kDir, split, o.task,
          std::string(split) == "train" ? o.train_limit : o.test_limit);
      ASSERT_TRUE(images.ok()) << images.status();
      ASSERT_TRUE(
          WriteLibsvm(absl::StrCat(dir, "/", split, ".svm"), *images, o.task)
              .ok());
    }
    const std::string s = loss == Loss::kL1 ? "3" : "1";
    const std::string trained =
        Output(absl::StrCat("/usr/bin/liblinear-train -s ", s,
                            " -c 0.1 -B 1 "
                            "-e 0.1 ",
                            dir, "/train.svm ", dir, "/model"));
    const std::string predicted =
        Output(absl::StrCat("/usr/bin/liblinear-predict ", dir, "/test.svm ",
                            dir, "/model ", dir, "/predictions"));
    const double objective = After(trained, "Objective value = ");
    const double accuracy = After(predicted, "Accuracy = ") / 100;
    ASSERT_FALSE(std::isnan(objective)) << trained;
    ASSERT_FALSE(std::isnan(accuracy)) << predicted;
    // LIBLINEAR prints the dual in minimisation form, as f(a) here.
    EXPECT_NEAR(ours.dual, objective, 0.01 * std::fabs(objective))
        << LossName(loss);
    EXPECT_NEAR(ours.accuracy, accuracy, 0.005) << LossName(loss);
  }
}

}  // namespace
}  // namespace svm
}  // namespace starling
