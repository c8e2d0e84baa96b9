// starling-svm through the real daemons on loopback: a coordinator
// (--optimizer none), 2 starling-node daemons and 4 starling-svm workers
// (2 per daemon). Every worker must exit 0 with the same weights, bit for
// bit, and the accuracy of the simulated 4-worker solve. And a daemon
// killed mid-solve: the survivors go on in the re-formed group.
#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/node/node_cluster.h"
#include "worker/svm/svm_run.h"
#include "worker/train/idx.h"

namespace starling {
namespace svm {
namespace {

using testing_node::BinaryPath;
using testing_node::ClusterOptions;
using testing_node::NodeCluster;
using testing_node::ProcessResult;

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double Field(const std::string& out, const std::string& key) {
  const size_t at = out.find(" " + key + "=");
  if (at == std::string::npos) return NAN;
  return std::atof(out.c_str() + at + key.size() + 2);
}

bool HasFashionMnist(const std::string& dir) {
  struct stat st;
  return ::stat((dir + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

// Plain all-reduce daemons (nothing is pushed) for starling-svm workers,
// which declare svm.w themselves.
ClusterOptions SvmCluster(int daemons, int local_workers) {
  ClusterOptions options;
  options.daemons = daemons;
  options.local_workers = local_workers;
  options.optimizer = "none";
  options.collective_timeout = absl::Seconds(30);
  options.fix_parameter_count = false;
  return options;
}

TEST(SvmCluster, FourWorkersOnTwoDaemonsAgreeOnTheWeights) {
  const std::string data(train::kDefaultFashionMnistDir);
  if (!HasFashionMnist(data)) {
    GTEST_SKIP() << data
                 << " has no Fashion-MNIST: install Debian's "
                    "dataset-fashion-mnist (deploy/setup.sh)";
  }
  ClusterOptions options = SvmCluster(2, 2);
  // Four busy workers on a 2-core machine can delay the daemons' heartbeats
  // past the 2 s default.
  options.heartbeat_timeout = absl::Seconds(30);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();

  const std::vector<std::string> common = {"--task=sandal_sneaker",
                                           "--loss=l1",
                                           "--C=0.1",
                                           "--eps=0.1",
                                           "--train_limit=2000",
                                           "--test_limit=1000",
                                           "--progress_every=20",
                                           "--timeout=60s"};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int d = 0; d < options.daemons; ++d) {
    for (int i = 0; i < options.local_workers; ++i) {
      std::vector<std::string> flags = common;
      outs.push_back(absl::StrCat(dir, "/w", d, "_", i, ".bin"));
      flags.push_back(absl::StrCat("--socket=", cluster.socket_path(d)));
      flags.push_back(absl::StrCat("--worker_index=", i));
      flags.push_back("--out=" + outs.back());
      pids.push_back(cluster.Spawn(absl::StrCat("svm", d, "_", i),
                                   BinaryPath("worker/svm/starling-svm"),
                                   flags));
    }
  }
  std::vector<ProcessResult> results;
  for (pid_t pid : pids) results.push_back(cluster.Wait(pid, absl::Minutes(3)));

  // The same solve with 4 simulated workers in this process.
  SvmRunOptions local;
  local.task = Task::kSandalSneaker;
  local.dcd.c = 0.1;
  local.data_dir = data;
  local.train_limit = 2000;
  local.test_limit = 1000;
  local.workers_simulated = 4;
  absl::StatusOr<SvmRunReport> simulated = RunSvm(local, nullptr);
  ASSERT_TRUE(simulated.ok()) << simulated.status();

  const std::string first = Bytes(outs[0]);
  EXPECT_EQ(first.size(), 785 * sizeof(double));
  for (size_t k = 0; k < results.size(); ++k) {
    const ProcessResult& r = results[k];
    ASSERT_FALSE(r.timed_out) << "worker " << k << " hung\n"
                              << r.out << r.err << cluster.ServerLogs();
    ASSERT_EQ(r.exit_code, 0) << "worker " << k << ":\n"
                              << r.out << r.err << cluster.ServerLogs();
    EXPECT_EQ(Field(r.out, "workers"), 4) << r.out;
    EXPECT_EQ(Field(r.out, "converged"), 1) << r.out;
    EXPECT_TRUE(Bytes(outs[k]) == first) << "worker " << k << "'s weights "
                                         << "differ from worker 0's";
    const double accuracy = Field(r.out, "accuracy");
    EXPECT_GT(accuracy, 0.9) << r.out;
    EXPECT_NEAR(accuracy, simulated->accuracy, 0.01) << r.out;
  }
  // Worker 0 (rank 0, index 0) printed the progress.
  EXPECT_NE(results[0].out.find("pass 1 class 5: touched 2000"),
            std::string::npos)
      << results[0].out;
}

// 3 daemons with a worker each, one-vs-rest (10 binary problems); daemon 1
// and its worker killed (SIGKILL) while class 2 or later is being solved.
// The other two workers rejoin the re-formed group, go on with the class
// under way from the a they held (the lost worker's samples from a = 0,
// every sample dealt again over two workers) and finish every class: the
// same weights, bit for bit, converged, and as accurate as a solve of two
// workers from the start.
TEST(SvmCluster, ADaemonLostMidSolveLeavesTheOthersGoingOn) {
  const std::string data(train::kDefaultFashionMnistDir);
  if (!HasFashionMnist(data)) {
    GTEST_SKIP() << data
                 << " has no Fashion-MNIST: install Debian's "
                    "dataset-fashion-mnist (deploy/setup.sh)";
  }
  ClusterOptions options = SvmCluster(3, 1);
  options.heartbeat_timeout = absl::Seconds(5);
  NodeCluster cluster(options);
  cluster.StartCoordinator();
  cluster.StartDaemons();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  std::vector<pid_t> pids;
  std::vector<std::string> outs;
  for (int d = 0; d < options.daemons; ++d) {
    outs.push_back(absl::StrCat(dir, "/lost", d, ".bin"));
    pids.push_back(cluster.Spawn(
        absl::StrCat("svm_lost", d), BinaryPath("worker/svm/starling-svm"),
        {"--task=ovr", "--loss=l1", "--C=0.1", "--eps=0.1",
         "--train_limit=3000", "--test_limit=1000", "--progress_every=1",
         "--timeout=60s", absl::StrCat("--socket=", cluster.socket_path(d)),
         "--worker_index=0", "--out=" + outs.back()}));
  }
  // Going: worker 0 printed a pass of class 2 (bounded).
  const absl::Time give_up = absl::Now() + absl::Minutes(3);
  while (cluster.Stdout(pids[0]).find(" class 2: ") == std::string::npos) {
    ASSERT_LT(absl::Now(), give_up)
        << "the solve did not get to class 2\n"
        << cluster.Stdout(pids[0]) << cluster.ServerLogs();
    for (pid_t pid : pids) {
      ASSERT_TRUE(cluster.Alive(pid))
          << cluster.Stdout(pid) << cluster.Stderr(pid) << cluster.ServerLogs();
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  cluster.Kill(cluster.daemon_pid(1), SIGKILL);
  cluster.Kill(pids[1], SIGKILL);

  SvmRunOptions local;
  local.task = Task::kOneVsRest;
  local.dcd.c = 0.1;
  local.data_dir = data;
  local.train_limit = 3000;
  local.test_limit = 1000;
  local.workers_simulated = 2;
  absl::StatusOr<SvmRunReport> simulated = RunSvm(local, nullptr);
  ASSERT_TRUE(simulated.ok()) << simulated.status();

  std::vector<ProcessResult> results;
  for (int d : {0, 2}) {
    results.push_back(cluster.Wait(pids[d], absl::Minutes(4)));
    const ProcessResult& r = results.back();
    ASSERT_FALSE(r.timed_out) << "worker " << d << " hung\n"
                              << r.out << r.err << cluster.ServerLogs();
    ASSERT_EQ(r.exit_code, 0) << "worker " << d << ":\n"
                              << r.out << r.err << cluster.ServerLogs();
    EXPECT_THAT(r.out, ::testing::HasSubstr("; rejoining the re-formed group"));
    EXPECT_THAT(r.out,
                ::testing::ContainsRegex(
                    "rejoined as worker [01] of 2; class [2-9] goes on from "
                    "the a the workers held, the samples dealt again \\([1-9]"
                    "[0-9]* of lost workers from a = 0\\)"));
    EXPECT_EQ(Field(r.out, "workers"), 2) << r.out;
    EXPECT_EQ(Field(r.out, "converged"), 1) << r.out;
    EXPECT_NEAR(Field(r.out, "accuracy"), simulated->accuracy, 0.02) << r.out;
    const size_t line = r.out.find("starling-svm: rejoined");
    std::printf(
        "worker %d: %s; accuracy %.4f (2 workers from the start: "
        "%.4f)\n",
        d,
        line == std::string::npos
            ? "-"
            : r.out.substr(line, r.out.find('\n', line) - line).c_str(),
        Field(r.out, "accuracy"), simulated->accuracy);
  }
  EXPECT_EQ(Bytes(outs[0]).size(), 10 * 785 * sizeof(double));
  EXPECT_TRUE(Bytes(outs[0]) == Bytes(outs[2]))
      << "the survivors' weights differ";
}

}  // namespace
}  // namespace svm
}  // namespace starling
