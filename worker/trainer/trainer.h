// Trainer: the reference Fashion-MNIST trainer behind `starling-worker`.
// One Trainer is one worker process of a job: it connects to its node
// daemon through //client, declares the model's tensors (worker/train
// model.h, in forward order), and trains the coordinator's schedule:
//
//   step t: wait for the pushes that last used this step's gradient set,
//           pull the parameters for t, forward and loss on this worker's
//           partition of iteration t, backward; each layer's gradients go
//           to the daemon (PushGradientsPartAsync) as soon as backward has
//           them, so communication overlaps the rest of backward.
//   end of each epoch: every worker evaluates its 1/W share of the test
//           set, and the counts are summed with Client::AllReduce; the
//           worker (rank 0, index 0) prints one table row.
//
// In the EASGD modes the worker keeps its own parameters, steps them
// locally and exchanges elastic differences with the daemons' centre every
// tau steps (elastic.h); the evaluation and --out are the centre's.
//
// Sync SGD and parameter-server mode keep one gradient set in the pool;
// async SGD keeps staleness() + 1 (a set is reused only after its pushes
// completed: the daemon reads it in place until then). The model computes
// in float32; float16/bfloat16 tensors are converted on the way to and
// from the pool. A worker started in place of one that left a running run
// (same index) resumes at Client::first_step().
//
// In sync_sgd, a step cut short because a daemon of the group was lost
// does not end the worker while the run goes on in the re-formed group:
// it rejoins (Client::Rejoin), logs where the run goes on and how many of
// its pushed steps were rolled back, pulls that step's parameters and
// trains on from there on the coordinator's schedule for the new group
// (the epoch's unread partitions over the remaining workers).
//
// A replacement that starts at an epoch's first step also does the ended
// epoch's evaluation all-reduce (and, after the last epoch, the barrier
// before it) unless its predecessor completed it
// (Client::resumed_collectives()), so a worker may die anywhere.
//
// Thread-compatible: Run() is called once, from one thread.
#ifndef STARLING_WORKER_TRAINER_TRAINER_H_
#define STARLING_WORKER_TRAINER_TRAINER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "worker/train/model.h"

namespace starling {
namespace trainer {

// Which worker(s) supply the run's initial parameters
// (Client::SetInitialParameters with Model::InitParameters(seed)).
struct InitFrom {
  enum class Kind { kWorker, kAll, kNone };
  Kind kind = Kind::kWorker;
  int rank = 0;   // kWorker only
  int index = 0;  // kWorker only
};

// "RANK:INDEX" (e.g. "0:0"), "all" or "none"; InvalidArgument otherwise.
absl::StatusOr<InitFrom> ParseInitFrom(absl::string_view text);

struct TrainerOptions {
  std::string socket_path;
  int worker_index = 0;
  train::ModelKind model = train::ModelKind::kMlp;
  int batch_size = 64;
  uint64_t seed = 1;
  // The tensors' type in the pool and on the wire: kFloat32, kFloat16 or
  // kBFloat16.
  client::DataType dtype = client::DataType::kFloat32;
  size_t bucket_bytes = client::ClientOptions::kDefaultBucketBytes;
  std::string device = "cpu";
  std::string data_dir;
  int64_t train_limit = 0;  // 0: all samples
  int64_t test_limit = 0;
  InitFrom init_from;
  absl::Duration progress_interval = absl::Seconds(2);
  std::string out_path;           // final parameters, raw float32 LE
  std::string epochs_table_path;  // CSV, one row per epoch
  absl::Duration timeout = absl::Seconds(60);
  size_t pool_bytes = size_t{64} << 20;
  // sync_sgd: re-formations of the group (a daemon lost, the run goes on)
  // to rejoin (Client::Rejoin) before a failed step ends the worker.
  int rejoins = 3;
  // Testing: after the pushes of this step completed, the process kills
  // itself (SIGKILL) as a crash would. -1: never.
  int64_t exit_after_step = -1;
  // Prints, per epoch, where this worker's steps went (waiting for its
  // earlier pushes, pulling, setting the model's parameters, computing).
  bool phase_times = false;
};

// Trains as described above, printing to stdout. Errors read
// "<what failed>: <CODE>: <message>".
absl::Status RunTrainer(const TrainerOptions& options);

}  // namespace trainer
}  // namespace starling

#endif  // STARLING_WORKER_TRAINER_TRAINER_H_
