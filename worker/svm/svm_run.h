// One starling-svm worker from data to report: loads the task's
// Fashion-MNIST samples (svm_data.h), takes this worker's strided part,
// solves each binary problem of the task with the CoCoA+ rounds of
// cocoa.h, evaluates on the test set and reports.
//
// Two ways to combine:
//   local   W simulated workers in this process (threads and an
//           InProcessAllReduce; W = 1 is plain DCD): no daemon needed.
//   client  this process is one worker of a Starling job: it connects to
//           its starling-node (ClientOptions), declares one float32 tensor
//           "svm.w" (the weights of every class, so that the job's
//           parameter count is the model's size), and every combine is a
//           Client::AllReduce of float32 (the sums, hence w, are the same
//           on every worker). W = total workers, and this worker's global
//           id is rank * local_workers + worker_index. The job should run
//           with starling-coordinator --optimizer none: nothing is pushed.
//           A daemon lost mid-solve: the run goes on in the re-formed
//           group (SvmRunOptions::rejoins), W and the global id anew.
//
// Output (stdout): worker 0 prints a line per pass ("pass ..."); every
// worker ends with one "starling-svm: done key=value ..." line (see
// FormatSummary). Thread-compatible.
#ifndef STARLING_WORKER_SVM_SVM_RUN_H_
#define STARLING_WORKER_SVM_SVM_RUN_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/svm/cocoa.h"
#include "worker/svm/dcd.h"
#include "worker/svm/svm_data.h"

namespace starling {
namespace svm {

struct SvmRunOptions {
  Task task = Task::kTShirtShirt;
  DcdOptions dcd;
  Combine combine = Combine::kAdd;
  // Local mode with this many simulated workers when socket_path is empty.
  int workers_simulated = 1;
  // Client mode: the daemon's worker socket and this worker's index there.
  std::string socket_path;
  int worker_index = 0;
  absl::Duration timeout = absl::Seconds(60);  // connect and each client op
  // Client mode: when a daemon of the group is lost and the run goes on in
  // the re-formed group, rejoin it up to this many times (0: end with the
  // error). The solve of the class under way goes on from the a every
  // worker held, the samples dealt again over the workers left (a lost
  // worker's from a = 0), w summed again from a; classes solved before
  // stay.
  int rejoins = 3;
  std::string data_dir;
  int64_t train_limit = 0;  // first N samples of the task's classes; 0: all
  int64_t test_limit = 0;
  int progress_every = 1;  // print every Nth pass (worker 0); 0: none
  std::string csv_path;    // optional: one row per pass (worker 0)
  std::string out_path;    // optional: final w, float64 little-endian
};

struct SvmRunReport {
  int workers = 1;
  int worker_id = 0;
  int64_t train_samples = 0;  // of the task, all workers
  int64_t test_samples = 0;
  int passes = 0;               // summed over the task's binary problems
  int rejoins = 0;              // client mode: re-formed groups gone on in
  int64_t touched = 0;          // coordinate visits, all workers, all problems
  bool converged = true;        // every problem met eps
  double accuracy = 0;          // test, in [0, 1]
  double primal = 0, dual = 0;  // summed over the problems
  absl::Duration load_time, solve_time;
  LinearModel model;
};

// Runs the worker; progress goes to `progress` (may be null). Errors:
// InvalidArgument (options), the data loader's, the client's (annotated
// with what was being done), or whatever the solve returned.
absl::StatusOr<SvmRunReport> RunSvm(const SvmRunOptions& options,
                                    std::FILE* progress);

// "starling-svm: done task=... loss=... C=... eps=... bias=... elimination=
// on|off combine=... workers=W worker=k train=N test=M passes=P
// touched=T accuracy=0.xxxx primal=... dual=... gap=... converged=0|1
// load_s=... solve_s=..."
std::string FormatSummary(const SvmRunOptions& options,
                          const SvmRunReport& report);

}  // namespace svm
}  // namespace starling

#endif  // STARLING_WORKER_SVM_SVM_RUN_H_
