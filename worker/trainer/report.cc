#include "worker/trainer/report.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace starling {
namespace trainer {

EpochRow RowFromSums(absl::Span<const float> s, int64_t epoch,
                     double epoch_seconds, int64_t staleness_max,
                     int64_t push_bytes_per_step) {
  EpochRow row;
  row.epoch = epoch;
  row.train_loss = s[kTrainBatches] > 0 ? s[kTrainLoss] / s[kTrainBatches] : 0;
  row.test_count = static_cast<int64_t>(s[kTestCount]);
  row.test_correct = static_cast<int64_t>(s[kTestCorrect]);
  row.test_loss = row.test_count > 0 ? s[kTestLoss] / row.test_count : 0;
  row.test_accuracy =
      row.test_count > 0
          ? static_cast<double>(row.test_correct) / row.test_count
          : 0;
  row.epoch_seconds = epoch_seconds;
  row.samples_per_second =
      epoch_seconds > 0 ? s[kTrainSamples] / epoch_seconds : 0;
  row.compute_ratio =
      s[kStepSeconds] > 0 ? s[kComputeSeconds] / s[kStepSeconds] : 0;
  row.staleness_mean = s[kSteps] > 0 ? s[kStalenessSum] / s[kSteps] : 0;
  row.staleness_max = staleness_max;
  row.push_bytes_per_step = push_bytes_per_step;
  return row;
}

std::string EpochTableHeader() {
  return absl::StrFormat("%5s %10s %9s %8s %8s %10s %7s %10s %9s %15s", "epoch",
                         "train_loss", "test_loss", "test_acc", "epoch_s",
                         "samples/s", "compute", "stale_mean", "stale_max",
                         "push_bytes/step");
}

std::string EpochTableRow(const EpochRow& row) {
  return absl::StrFormat(
      "%5d %10.4f %9.4f %7.2f%% %8.2f %10.1f %7.3f %10.2f %9d %15d", row.epoch,
      row.train_loss, row.test_loss, 100.0 * row.test_accuracy,
      row.epoch_seconds, row.samples_per_second, row.compute_ratio,
      row.staleness_mean, row.staleness_max, row.push_bytes_per_step);
}

EpochsCsv::~EpochsCsv() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status EpochsCsv::Open(const std::string& path) {
  path_ = path;
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create --epochs_table file ", path, ": ",
                     std::strerror(errno)));
  }
  std::fprintf(file_,
               "epoch,train_loss,test_loss,test_accuracy,test_correct,"
               "test_count,epoch_seconds,samples_per_second,compute_ratio,"
               "staleness_mean,staleness_max,push_bytes_per_step\n");
  std::fflush(file_);
  return absl::OkStatus();
}

absl::Status EpochsCsv::Append(const EpochRow& row) {
  if (file_ == nullptr) return absl::OkStatus();
  const int written = std::fprintf(
      file_, "%lld,%.6f,%.6f,%.6f,%lld,%lld,%.3f,%.1f,%.4f,%.3f,%lld,%lld\n",
      static_cast<long long>(row.epoch),  // NOLINT(runtime/int)
      row.train_loss, row.test_loss, row.test_accuracy,
      static_cast<long long>(row.test_correct),  // NOLINT(runtime/int)
      static_cast<long long>(row.test_count),    // NOLINT(runtime/int)
      row.epoch_seconds, row.samples_per_second, row.compute_ratio,
      row.staleness_mean,
      static_cast<long long>(row.staleness_max),         // NOLINT(runtime/int)
      static_cast<long long>(row.push_bytes_per_step));  // NOLINT(runtime/int)
  if (written < 0 || std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("writing --epochs_table file ",
                                            path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string ShortDuration(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  const int64_t seconds = absl::ToInt64Seconds(d);
  if (seconds >= 3600) {
    return absl::StrFormat("%dh%02dm", seconds / 3600, (seconds / 60) % 60);
  }
  if (seconds >= 60) {
    return absl::StrFormat("%dm%02ds", seconds / 60, seconds % 60);
  }
  return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
}

std::string ProgressLine(const Progress& p) {
  return absl::StrFormat(
      "epoch %d/%d  step %d/%d  %.0f samples/s (job ~%.0f)  loss %.4f  ETA %s",
      p.epoch, p.epochs, p.step_in_epoch, p.steps_per_epoch,
      p.samples_per_second, p.job_samples_per_second, p.loss,
      ShortDuration(p.eta));
}

}  // namespace trainer
}  // namespace starling
