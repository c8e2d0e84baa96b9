#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "server/base/status_macros.h"
#include "worker/train/backend.h"
#include "worker/train/dataset.h"
#include "worker/train/idx.h"
#include "worker/train/model.h"
#include "worker/trainer/elastic.h"
#include "worker/trainer/pool_tensors.h"
#include "worker/trainer/report.h"
#include "worker/trainer/trainer_impl.h"
namespace starling {
namespace trainer {
namespace internal {

std::vector<int64_t> Trainer::Samples(const client::ScheduledIteration& it) {
  std::vector<int64_t> samples;
  const std::vector<int64_t>& order = Order(it.epoch);
  for (uint64_t p : it.partitions) {
    absl::Span<const int64_t> part = train::PartitionSamples(
        order, static_cast<int64_t>(p), options_.batch_size);
    samples.insert(samples.end(), part.begin(), part.end());
  }
  return samples;
}

absl::Status Trainer::ForwardBackward(
    int64_t t, const std::vector<int64_t>& samples,
    const train::GradientsReadyCallback& ready) {
  if (samples.size() > y_.size()) {
    return Failed(
        absl::StrCat("step ", t),
        absl::UnimplementedError(absl::StrCat(
            "the schedule gives this worker ", samples.size(),
            " samples in one iteration; at most ", y_.size(), " fit a batch")));
  }
  const int batch = static_cast<int>(samples.size());
  train_.Gather(samples, x_.data(), y_.data());
  STARLING_RETURN_IF_ERROR(Failed(absl::StrCat("forward of step ", t),
                                  model_->Forward(x_.data(), batch)));
  absl::StatusOr<float> loss = model_->Loss(y_.data());
  if (!loss.ok()) {
    return Failed(absl::StrCat("loss of step ", t), loss.status());
  }
  sums_[kTrainLoss] += *loss;
  sums_[kTrainBatches] += 1;
  sums_[kTrainSamples] += batch;
  progress_loss_ += *loss;
  ++progress_batches_;
  progress_samples_ += batch;
  // For the daemon's metrics (the training dashboard): sent with the push.
  client_->ReportProgress(batch, static_cast<double>(*loss)).IgnoreError();
  STARLING_RETURN_IF_ERROR(Failed(absl::StrCat("backward of step ", t),
                                  model_->Backward(y_.data(), ready)));
  return absl::OkStatus();
}

absl::Status Trainer::Step(const client::ScheduledIteration& it) {
  const int64_t t = it.iteration;
  const absl::Time step_start = absl::Now();
  if (elastic_ != nullptr) return ElasticStep(it, step_start);
  const int slot = static_cast<int>(t % SlotCount());
  // The daemon reads this set in place until its pushes completed.
  STARLING_RETURN_IF_ERROR(WaitSlot(slot));
  const absl::Time pull_start = absl::Now();
  STARLING_RETURN_IF_ERROR(Pull(t, absl::StrCat("step ", t)));
  phase_wait_ += absl::ToDoubleSeconds(pull_start - step_start);
  phase_pull_ += absl::ToDoubleSeconds(absl::Now() - pull_start);
  phase_set_ += last_set_seconds_;
  const int64_t stale =
      std::max<int64_t>(0, t - client_->last_pulled_version());
  if (mode_ == "parameter_server") {
    // Versions mean nothing there.
  } else {
    sums_[kStalenessSum] += stale;
    staleness_max_ = std::max(staleness_max_, stale);
  }

  const absl::Time compute_start = absl::Now();
  const std::vector<int64_t> samples = Samples(it);
  std::vector<Future>& pushes = pushes_[slot];
  std::vector<PoolTensor>& grads = grads_[slot];
  if (samples.empty()) {
    // No data for this worker in this iteration: the step still needs its
    // push, of zeros.
    std::vector<Tensor> all;
    for (size_t i = 0; i < tensors_->size(); ++i) {
      std::fill(grads[i].f32.begin(), grads[i].f32.end(), 0.0f);
      std::fill(grads[i].b16.begin(), grads[i].b16.end(), uint16_t{0});
      all.push_back(AsTensor((*tensors_)[i].name, grads[i]));
    }
    pushes.push_back(client_->PushGradientsAsync(t, all));
  } else {
    const absl::Span<const float> g = model_->gradients();
    // Each layer's gradients go to the daemon as soon as they are ready.
    STARLING_RETURN_IF_ERROR(
        ForwardBackward(t, samples, [&](const std::vector<int>& ready) {
          std::vector<Tensor> part;
          for (int i : ready) {
            const train::TensorInfo& info = (*tensors_)[i];
            ToPool(options_.dtype, g.subspan(info.offset, info.elements),
                   grads[i]);
            part.push_back(AsTensor(info.name, grads[i]));
          }
          pushes.push_back(client_->PushGradientsPartAsync(t, part));
        }));
  }
  const absl::Duration compute = absl::Now() - compute_start;
  phase_compute_ += absl::ToDoubleSeconds(compute);
  ++phase_steps_;

  if (t == options_.exit_after_step) {
    STARLING_RETURN_IF_ERROR(WaitSlot(slot));
    KillMyself(t);
  }
  StepDone(compute, absl::Now() - step_start);
  return absl::OkStatus();
}

absl::Status Trainer::ElasticStep(const client::ScheduledIteration& it,
                                  absl::Time step_start) {
  const int64_t t = it.iteration;
  const std::vector<int64_t> samples = Samples(it);
  if (!samples.empty()) {
    STARLING_RETURN_IF_ERROR(ForwardBackward(t, samples, nullptr));
    elastic_->LocalStep(absl::MakeSpan(host_params_), model_->gradients());
  }
  const absl::Duration compute = absl::Now() - step_start;
  STARLING_RETURN_IF_ERROR(
      elastic_->MaybeExchange(t, absl::MakeSpan(host_params_)));
  STARLING_RETURN_IF_ERROR(Failed("setting the model's parameters",
                                  model_->SetParameters(host_params_)));
  if (t == options_.exit_after_step) {
    STARLING_RETURN_IF_ERROR(
        Failed("the last elastic exchange", elastic_->Flush()));
    KillMyself(t);
  }
  StepDone(compute, absl::Now() - step_start);
  return absl::OkStatus();
}

void Trainer::KillMyself(int64_t t) {
  std::printf("starling-worker: --exit_after_step=%lld: killing myself\n",
              static_cast<long long>(t));  // NOLINT(runtime/int)
  std::fflush(stdout);
  ::raise(SIGKILL);
}

void Trainer::StepDone(absl::Duration compute, absl::Duration step) {
  client_->ReportStepTimes(compute, step);
  sums_[kComputeSeconds] += absl::ToDoubleSeconds(compute);
  sums_[kStepSeconds] += absl::ToDoubleSeconds(step);
  sums_[kSteps] += 1;
  total_compute_ += absl::ToDoubleSeconds(compute);
  total_step_ += absl::ToDoubleSeconds(step);
  ++steps_done_;
}

void Trainer::MaybeProgress(const client::ScheduledIteration& it) {
  const absl::Time now = absl::Now();
  if (now - last_progress_ < options_.progress_interval) return;
  Progress p;
  p.epoch = it.epoch + 1;
  p.epochs = epochs_;
  p.step_in_epoch = it.iteration_in_epoch + 1;
  p.steps_per_epoch = iterations_per_epoch_;
  const double seconds = absl::ToDoubleSeconds(now - last_progress_);
  p.samples_per_second = seconds > 0 ? progress_samples_ / seconds : 0;
  p.job_samples_per_second = p.samples_per_second * client_->total_workers();
  p.loss = progress_batches_ > 0 ? progress_loss_ / progress_batches_ : 0;
  const int64_t remaining = total_steps_ - it.iteration - 1;
  p.eta = steps_done_ > 0 ? (now - start_) / steps_done_ * remaining
                          : absl::ZeroDuration();
  std::printf("%s\n", ProgressLine(p).c_str());
  std::fflush(stdout);
  last_progress_ = now;
  progress_samples_ = 0;
  progress_loss_ = 0;
  progress_batches_ = 0;
}

absl::Status Trainer::EndEpoch(int64_t last_step, int64_t epoch, bool last) {
  const double epoch_seconds =
      absl::ToDoubleSeconds(absl::Now() - epoch_start_);
  if (options_.phase_times && phase_steps_ > 0) {
    const double ms = 1e3 / static_cast<double>(phase_steps_);
    std::printf(
        "starling-worker: epoch %lld, worker %d: %lld steps, ms per step: "
        "waiting for pushes %.3f, pulling %.3f (setting the model's "
        "parameters %.3f), computing %.3f\n",
        static_cast<long long>(epoch + 1), WorkerNumber(),  // NOLINT
        static_cast<long long>(phase_steps_),               // NOLINT
        phase_wait_ * ms, phase_pull_ * ms, phase_set_ * ms,
        phase_compute_ * ms);
    std::fflush(stdout);
  }
  phase_wait_ = phase_pull_ = phase_set_ = phase_compute_ = 0;
  phase_steps_ = 0;
  if (elastic_ != nullptr) {
    STARLING_RETURN_IF_ERROR(EvaluateCenter(last));
  } else if (last) {
    // Every push done and every worker past its last step: the final
    // parameters are the same on every worker.
    for (int s = 0; s < SlotCount(); ++s) {
      STARLING_RETURN_IF_ERROR(WaitSlot(s));
    }
    STARLING_RETURN_IF_ERROR(
        Failed("the barrier after the last step", client_->Barrier()));
    // async_sgd: a pull for total + staleness includes every update.
    STARLING_RETURN_IF_ERROR(
        Pull(total_steps_ + staleness_, "the final parameters"));
  } else {
    STARLING_RETURN_IF_ERROR(
        Pull(last_step + 1, absl::StrCat("evaluation of epoch ", epoch + 1)));
  }
  // This worker's share of the test set.
  const int w = WorkerNumber();
  const int workers = client_->total_workers();
  const int64_t n = test_.size();
  const int64_t begin = n * w / workers;
  const int64_t end = n * (w + 1) / workers;
  absl::StatusOr<train::EvalResult> eval =
      model_->Evaluate(test_, begin, end, std::min(256, model_->max_batch()));
  if (!eval.ok()) {
    return Failed(absl::StrCat("evaluating epoch ", epoch + 1), eval.status());
  }
  if (elastic_ != nullptr) {
    // Back to this worker's own parameters.
    STARLING_RETURN_IF_ERROR(Failed("setting the model's parameters",
                                    model_->SetParameters(host_params_)));
  }
  sums_[kTestLoss] = eval->loss_sum;
  sums_[kTestCorrect] = static_cast<double>(eval->correct);
  sums_[kTestCount] = static_cast<double>(eval->count);
  std::fill(sums_buffer_.begin(), sums_buffer_.end(), 0.0f);
  for (int i = 0; i < kSums; ++i) {
    sums_buffer_[i] = static_cast<float>(sums_[i]);
  }
  sums_buffer_[kSums + WorkerNumber()] = static_cast<float>(staleness_max_);
  STARLING_RETURN_IF_ERROR(
      Failed(absl::StrCat("all-reducing epoch ", epoch + 1, "'s counts"),
             client_->AllReduce(sums_buffer_)));
  const absl::Span<const float> s = sums_buffer_;
  if (s[kTestCount] > 0) {
    // The job's test accuracy, exported by the daemon with the next push.
    client_
        ->ReportProgress(0, std::nullopt,
                         static_cast<double>(s[kTestCorrect]) /
                             static_cast<double>(s[kTestCount]))
        .IgnoreError();  // a count over a count: always in 0..1
  }
  int64_t staleness_max = 0;
  for (size_t i = kSums; i < s.size(); ++i) {
    staleness_max = std::max(staleness_max, static_cast<int64_t>(s[i]));
  }
  const EpochRow row =
      RowFromSums(s.subspan(0, kSums), epoch + 1, epoch_seconds, staleness_max,
                  push_bytes_per_step_);
  if (Reporter()) {
    std::printf("%s\n", EpochTableRow(row).c_str());
    std::fflush(stdout);
  }
  STARLING_RETURN_IF_ERROR(Failed("writing --epochs_table", csv_.Append(row)));
  last_row_ = row;
  have_row_ = true;
  for (double& v : sums_) v = 0;
  staleness_max_ = 0;
  epoch_start_ = absl::Now();
  return absl::OkStatus();
}

absl::Status Trainer::EvaluateCenter(bool last) {
  if (last) {
    // Every exchange applied: the centre is the same for every worker.
    STARLING_RETURN_IF_ERROR(Failed("waiting for the last elastic exchange",
                                    elastic_->RefreshCenter()));
    STARLING_RETURN_IF_ERROR(
        Failed("the barrier after the last step", client_->Barrier()));
  }
  STARLING_RETURN_IF_ERROR(
      Failed("pulling the centre", elastic_->RefreshCenter()));
  STARLING_RETURN_IF_ERROR(Failed("setting the centre for evaluation",
                                  model_->SetParameters(elastic_->center())));
  return absl::OkStatus();
}

absl::Status Trainer::WriteOut() {
  if (options_.out_path.empty()) return absl::OkStatus();
  // The EASGD modes' result is the centre.
  const std::vector<float>& out =
      elastic_ != nullptr ? elastic_->center() : host_params_;
  std::FILE* f = std::fopen(options_.out_path.c_str(), "wb");
  bool ok = f != nullptr;
  if (ok) {
    // Raw float32, little-endian (the hosts we build for).
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                  "--out writes the host's float32 bytes");
    ok = std::fwrite(out.data(), sizeof(float), out.size(), f) == out.size();
    ok = std::fclose(f) == 0 && ok;
  }
  if (!ok) {
    return Failed("writing --out", absl::DataLossError(absl::StrCat(
                                       "cannot write ", options_.out_path, ": ",
                                       std::strerror(errno))));
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace trainer
}  // namespace starling
