// starling-worker: the reference Fashion-MNIST trainer (trainer.h). One
// process per worker slot of a node daemon; the job's settings (mode,
// optimizer, learning rate, epochs, staleness, partitions per epoch, K)
// are the coordinator's flags, learned through the daemon.
//
//   starling-worker --socket=/run/starling/node.sock --worker_index=0
//       --model=mlp --batch_size=64 --dtype=float32
//
// Exit codes: 0 when the run finished; 1 on any error, with one line
// "starling-worker: <what failed>: <status>" on stderr.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "server/base/command_line.h"
#include "server/base/version.h"
#include "server/base/worker_socket.h"
#include "worker/train/idx.h"
#include "worker/train/model.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(std::string, socket, starling::kDefaultWorkerSocket,
          "the local starling-node's --worker_socket");
ABSL_FLAG(int, worker_index, 0,
          "this worker's index on its daemon, 0 .. --local_workers - 1");
ABSL_FLAG(std::string, model, "mlp", "network: mlp or cnn");
ABSL_FLAG(int, batch_size, 64,
          "samples per step of this worker (one data partition); the "
          "coordinator's --partitions_per_epoch must be ceil(train samples / "
          "batch_size)");
ABSL_FLAG(uint64_t, seed, 1,
          "seed of the initial parameters and of the epochs' sample order "
          "(the same on every worker)");
ABSL_FLAG(std::string, dtype, "float32",
          "type of the gradients and parameters in the pool and on the wire: "
          "float32, float16 or bfloat16 (the model computes in float32)");
ABSL_FLAG(
    int64_t, bucket_bytes,
    static_cast<int64_t>(starling::client::ClientOptions::kDefaultBucketBytes),
    "gradient bucket size in bytes (every worker the same); 0 = one "
    "bucket: push everything after backward, no overlap");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or gpu (only in a --config=cuda build)");
ABSL_FLAG(std::string, data_dir,
          std::string(starling::train::kDefaultFashionMnistDir),
          "directory of the Fashion-MNIST idx files (deploy/setup.sh)");
ABSL_FLAG(int64_t, train_limit, 0,
          "use only the first N training samples; 0 = all 60000");
ABSL_FLAG(int64_t, test_limit, 0,
          "use only the first N test samples; 0 = all 10000");
ABSL_FLAG(std::string, init_from, "0:0",
          "who supplies the initial parameters: RANK:INDEX (that worker), "
          "\"all\" (every worker; the first in (rank, index) order wins) or "
          "\"none\" (zeros); the others pull version 0");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(2),
          "time between progress lines (> 0)");
ABSL_FLAG(std::string, out, "",
          "optional file: the final parameters as raw float32 little-endian");
ABSL_FLAG(std::string, epochs_table, "",
          "optional CSV file: one row per epoch (the table's columns), "
          "written by the worker that prints the table (rank 0, index 0)");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "bound on connecting and on each client op (> 0)");
ABSL_FLAG(int64_t, pool_mb, 64,
          "shared-memory pool size in MiB (parameters + staleness + 1 "
          "gradient sets)");
ABSL_FLAG(int, rejoins, 3,
          "sync_sgd, parameter_server, async_easgd, async_measgd, "
          "hogwild_easgd: when a daemon of the group is lost and the run "
          "goes on in the re-formed group, rejoin it up to this many times "
          "(0: end with the error)");
ABSL_FLAG(bool, phase_times, false,
          "print, per epoch, this worker's milliseconds per step waiting for "
          "its earlier pushes, pulling (and setting the model's parameters) "
          "and computing");
ABSL_FLAG(int64_t, exit_after_step, -1,
          "testing only: kill this process (SIGKILL) once the pushes of this "
          "step completed, as a crash would; -1 = never");

namespace starling {
namespace trainer {
namespace {

int Fail(const std::string& what, const std::string& why) {
  std::fprintf(stderr, "starling-worker: %s: %s\n", what.c_str(), why.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  StartProgram(
      {"starling-worker", "worker/trainer/main.cc", kStarlingVersion,
       "the Starling reference trainer (Fashion-MNIST, MLP or CNN); the job's "
       "settings are the coordinator's flags"},
      argc, argv);
  TrainerOptions o;
  o.socket_path = absl::GetFlag(FLAGS_socket);
  if (o.socket_path.empty()) return Fail("--socket", "must not be empty");
  o.worker_index = absl::GetFlag(FLAGS_worker_index);
  if (o.worker_index < 0) {
    return Fail("--worker_index",
                absl::StrCat("must be >= 0, got ", o.worker_index));
  }
  absl::StatusOr<train::ModelKind> model =
      train::ParseModelKind(absl::GetFlag(FLAGS_model));
  if (!model.ok()) {
    return Fail("--model", std::string(model.status().message()));
  }
  o.model = *model;
  o.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (o.batch_size < 1 || o.batch_size > 65536) {
    return Fail("--batch_size",
                absl::StrCat("must be in 1..65536, got ", o.batch_size));
  }
  o.seed = absl::GetFlag(FLAGS_seed);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "float32") {
    o.dtype = client::DataType::kFloat32;
  } else if (dtype == "float16") {
    o.dtype = client::DataType::kFloat16;
  } else if (dtype == "bfloat16") {
    o.dtype = client::DataType::kBFloat16;
  } else {
    return Fail("--dtype", absl::StrCat("\"", dtype,
                                        "\": expected float32, float16 or "
                                        "bfloat16"));
  }
  const int64_t bucket_bytes = absl::GetFlag(FLAGS_bucket_bytes);
  if (bucket_bytes < 0) {
    return Fail("--bucket_bytes",
                absl::StrCat("must be >= 0, got ", bucket_bytes));
  }
  o.bucket_bytes = static_cast<size_t>(bucket_bytes);
  o.device = absl::GetFlag(FLAGS_device);
  if (o.device != "cpu" && o.device != "gpu") {
    return Fail("--device",
                absl::StrCat("\"", o.device, "\": expected cpu or gpu"));
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
  absl::StatusOr<InitFrom> init = ParseInitFrom(absl::GetFlag(FLAGS_init_from));
  if (!init.ok()) {
    return Fail("--init_from", std::string(init.status().message()));
  }
  o.init_from = *init;
  o.progress_interval = absl::GetFlag(FLAGS_progress_interval);
  if (o.progress_interval <= absl::ZeroDuration()) {
    return Fail("--progress_interval",
                absl::StrCat("must be > 0, got ",
                             absl::FormatDuration(o.progress_interval)));
  }
  o.out_path = absl::GetFlag(FLAGS_out);
  o.epochs_table_path = absl::GetFlag(FLAGS_epochs_table);
  o.timeout = absl::GetFlag(FLAGS_timeout);
  if (o.timeout <= absl::ZeroDuration()) {
    return Fail("--timeout", absl::StrCat("must be > 0, got ",
                                          absl::FormatDuration(o.timeout)));
  }
  const int64_t pool_mb = absl::GetFlag(FLAGS_pool_mb);
  if (pool_mb < 1 || pool_mb > 65536) {
    return Fail("--pool_mb",
                absl::StrCat("must be in 1..65536, got ", pool_mb));
  }
  o.pool_bytes = static_cast<size_t>(pool_mb) << 20;
  o.rejoins = std::max(0, absl::GetFlag(FLAGS_rejoins));
  o.exit_after_step = absl::GetFlag(FLAGS_exit_after_step);
  o.phase_times = absl::GetFlag(FLAGS_phase_times);
  if (o.exit_after_step < -1) {
    return Fail("--exit_after_step",
                absl::StrCat("must be >= -1, got ", o.exit_after_step));
  }

  const absl::Status status = RunTrainer(o);
  if (!status.ok()) {
    std::fflush(stdout);
    std::fprintf(stderr, "starling-worker: %s\n",
                 std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace trainer
}  // namespace starling

int main(int argc, char** argv) { return starling::trainer::Main(argc, argv); }
