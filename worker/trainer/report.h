// Report: the trainer's human-readable output: the per-epoch table (and
// its CSV copy) and the progress line. Pure formatting, no I/O except
// EpochsCsv's file.
//
// Thread-compatible.
#ifndef STARLING_WORKER_TRAINER_REPORT_H_
#define STARLING_WORKER_TRAINER_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace starling {
namespace trainer {

// One epoch, summed over every worker of the job (AllReduce) unless said.
struct EpochRow {
  int64_t epoch = 0;         // from 1
  double train_loss = 0;     // mean over every worker's batches
  double test_loss = 0;      // mean over the test samples
  double test_accuracy = 0;  // 0..1
  int64_t test_correct = 0;
  int64_t test_count = 0;
  double epoch_seconds = 0;  // this worker's wall time for the epoch
  double samples_per_second =
      0;                      // every worker's training samples / epoch_seconds
  double compute_ratio = 0;   // sum compute / sum step time, all workers
  double staleness_mean = 0;  // over every worker's steps
  int64_t staleness_max = 0;  // over every worker's steps
  int64_t push_bytes_per_step = 0;  // one worker's gradients
};

// What every worker adds up for an epoch (the all-reduce's floats, in
// this order).
enum EpochSum {
  kTestLoss,  // sum over test samples
  kTestCorrect,
  kTestCount,
  kTrainLoss,  // sum of batch means
  kTrainBatches,
  kTrainSamples,
  kComputeSeconds,
  kStepSeconds,
  kStalenessSum,  // of t - last pulled version
  kSteps,
  kSums
};

// The row of epoch `epoch` (from 1) from the job's sums; the rest is the
// reporting worker's.
EpochRow RowFromSums(absl::Span<const float> sums, int64_t epoch,
                     double epoch_seconds, int64_t staleness_max,
                     int64_t push_bytes_per_step);

// The table's header and one row (fixed-width columns, no newline).
std::string EpochTableHeader();
std::string EpochTableRow(const EpochRow& row);

// The CSV file of --epochs_table: header at Open, one line per Append,
// flushed each time (a crash leaves the rows written so far).
class EpochsCsv {
 public:
  EpochsCsv() = default;
  ~EpochsCsv();
  EpochsCsv(const EpochsCsv&) = delete;
  EpochsCsv& operator=(const EpochsCsv&) = delete;

  // Creates (truncates) `path` and writes the header.
  absl::Status Open(const std::string& path);
  bool is_open() const { return file_ != nullptr; }
  absl::Status Append(const EpochRow& row);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// "epoch 1/3  step 120/938  812 samples/s (job ~3248)  loss 0.512
// ETA 1m32s".
struct Progress {
  int64_t epoch = 0;  // from 1
  int64_t epochs = 0;
  int64_t step_in_epoch = 0;  // from 1
  int64_t steps_per_epoch = 0;
  double samples_per_second = 0;      // this worker, since the last line
  double job_samples_per_second = 0;  // estimate: x the job's workers
  double loss = 0;                    // mean since the last line
  absl::Duration eta;
};
std::string ProgressLine(const Progress& progress);

// "1h02m", "3m05s", "12.3s".
std::string ShortDuration(absl::Duration d);

}  // namespace trainer
}  // namespace starling

#endif  // STARLING_WORKER_TRAINER_REPORT_H_
