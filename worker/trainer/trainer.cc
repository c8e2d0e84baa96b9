#include "worker/trainer/trainer.h"

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

namespace starling {
namespace trainer {
namespace {

using client::Client;
using client::DataType;
using client::Future;
using client::Tensor;

// "<what>: <CODE>: <message>" (what main prints after "starling-worker: ").
absl::Status Failed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.ToString()));
}

// Returns Failed(what, status) when `expr` fails.
#define TRAINER_CHECK_OK(what, expr)                                 \
  do {                                                               \
    ::absl::Status trainer_status_ = (expr);                         \
    if (!trainer_status_.ok()) return Failed(what, trainer_status_); \
  } while (false)

class Trainer {
 public:
  explicit Trainer(const TrainerOptions& options) : options_(options) {}
  absl::Status Run();

 private:
  absl::Status Setup();
  absl::Status Begin();
  absl::StatusOr<const client::ScheduledIteration*> Iteration(int64_t t);
  absl::StatusOr<client::Schedule> FetchSchedule(int64_t next);
  absl::Status Step(const client::ScheduledIteration& it);
  // The samples of iteration `it` for this worker.
  std::vector<int64_t> Samples(const client::ScheduledIteration& it);
  // Forward, loss and backward of step t on `samples` (not empty), calling
  // `ready` as each layer's gradients are done; adds to the epoch's sums.
  absl::Status ForwardBackward(int64_t t, const std::vector<int64_t>& samples,
                               const train::GradientsReadyCallback& ready);
  // Step() in the EASGD modes: local step, then the elastic exchange.
  absl::Status ElasticStep(const client::ScheduledIteration& it,
                           absl::Time step_start);
  // Records one step's times.
  void StepDone(absl::Duration compute, absl::Duration step);
  // The EASGD modes' evaluation parameters: the centre.
  absl::Status EvaluateCenter(bool last);
  absl::Status WaitSlot(int slot);
  absl::Status Pull(int64_t version, const std::string& why);
  absl::Status EndEpoch(int64_t last_step, int64_t epoch, bool last);
  absl::Status WriteOut();
  void MaybeProgress(const client::ScheduledIteration& it);
  const std::vector<int64_t>& Order(int64_t epoch);
  int WorkerNumber() const {
    return client_->rank() * client_->local_workers() + client_->worker_index();
  }
  bool Reporter() const {
    return client_->rank() == 0 && client_->worker_index() == 0;
  }
  int SlotCount() const { return static_cast<int>(grads_.size()); }

  const TrainerOptions options_;
  train::Dataset train_, test_;
  std::unique_ptr<train::Backend> backend_;
  std::unique_ptr<train::Model> model_;
  std::unique_ptr<Client> client_;
  const std::vector<train::TensorInfo>* tensors_ = nullptr;
  std::vector<PoolTensor> params_;              // pulled here
  std::vector<std::vector<PoolTensor>> grads_;  // [slot][tensor]
  std::vector<std::vector<Future>> pushes_;     // [slot]
  std::vector<float> host_params_;
  int64_t push_bytes_per_step_ = 0;
  int buckets_ = 0;

  // The schedule fetched last, by iteration.
  std::map<int64_t, client::ScheduledIteration> schedule_;
  bool schedule_done_ = false;
  int64_t epochs_ = 0;
  int64_t iterations_per_epoch_ = 0;
  uint64_t partitions_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t first_step_ = 0;
  std::string mode_;
  int staleness_ = 0;
  std::unique_ptr<ElasticWorker> elastic_;  // EASGD modes

  std::map<int64_t, std::vector<int64_t>> orders_;  // by epoch
  std::vector<float> x_;
  std::vector<uint8_t> y_;

  // Per-epoch sums of this worker (reset at each epoch's end).
  double sums_[kSums] = {};
  absl::Span<float> sums_buffer_;  // in the pool, for the all-reduce
  int64_t staleness_max_ = 0;
  absl::Time epoch_start_;
  // For the progress line.
  absl::Time start_, last_progress_;
  int64_t steps_done_ = 0;
  int64_t progress_samples_ = 0;
  double progress_loss_ = 0;
  int64_t progress_batches_ = 0;
  // Whole run, this worker.
  double total_compute_ = 0, total_step_ = 0;
  EpochsCsv csv_;
  EpochRow last_row_;
  bool have_row_ = false;
};

absl::Status Trainer::Setup() {
  const std::string dir = options_.data_dir.empty()
                              ? std::string(train::kDefaultFashionMnistDir)
                              : options_.data_dir;
  const int64_t all = std::numeric_limits<int64_t>::max();
  absl::StatusOr<train::Dataset> train = train::LoadFashionMnist(
      dir, "train", options_.train_limit > 0 ? options_.train_limit : all);
  if (!train.ok()) return Failed("loading the training set", train.status());
  train_ = std::move(*train);
  absl::StatusOr<train::Dataset> test = train::LoadFashionMnist(
      dir, "test", options_.test_limit > 0 ? options_.test_limit : all);
  if (!test.ok()) return Failed("loading the test set", test.status());
  test_ = std::move(*test);

  absl::StatusOr<std::unique_ptr<train::Backend>> backend =
      train::CreateBackend(options_.device);
  if (!backend.ok()) {
    return Failed(absl::StrCat("creating the ", options_.device, " backend"),
                  backend.status());
  }
  backend_ = std::move(*backend);
  const int max_batch = std::max(options_.batch_size, 256);
  absl::StatusOr<std::unique_ptr<train::Model>> model =
      train::Model::Create(options_.model, backend_.get(), max_batch);
  if (!model.ok()) return Failed("creating the model", model.status());
  model_ = std::move(*model);
  tensors_ = &model_->tensors();
  host_params_.assign(model_->parameter_count(), 0.0f);
  x_.resize(static_cast<size_t>(max_batch) * train::kImageElements);
  y_.resize(max_batch);

  if (!options_.out_path.empty()) {
    // Fail now rather than after the training.
    std::FILE* f = std::fopen(options_.out_path.c_str(), "w");
    if (f == nullptr) {
      return Failed("opening --out", absl::InvalidArgumentError(absl::StrCat(
                                         "cannot create ", options_.out_path,
                                         ": ", std::strerror(errno))));
    }
    std::fclose(f);
  }

  client::ClientOptions copts;
  copts.socket_path = options_.socket_path;
  copts.worker_index = options_.worker_index;
  copts.timeout = options_.timeout;
  copts.bucket_bytes = options_.bucket_bytes;
  copts.pool_bytes = options_.pool_bytes;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(copts);
  if (!client.ok()) {
    return Failed(
        absl::StrCat("connecting to the daemon at ", options_.socket_path),
        client.status());
  }
  client_ = std::move(*client);

  // Buckets as the client forms them (proto/tensor_table.h): from the last
  // declared tensor, a bucket takes tensors while they fit in bucket_bytes;
  // one that would overflow a non-empty bucket begins the next.
  const size_t element_bytes =
      options_.dtype == DataType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
  size_t filled = 0;
  for (auto t = tensors_->rbegin(); t != tensors_->rend(); ++t) {
    const size_t bytes = t->elements * element_bytes;
    if (buckets_ == 0 || (options_.bucket_bytes != 0 && filled > 0 &&
                          filled + bytes > options_.bucket_bytes)) {
      ++buckets_;
      filled = 0;
    }
    filled += bytes;
    push_bytes_per_step_ += bytes;
  }

  for (const train::TensorInfo& t : *tensors_) {
    TRAINER_CHECK_OK(absl::StrCat("declaring tensor ", t.name),
                     client_->DeclareTensor(t.name, t.shape, options_.dtype));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Pull(int64_t version, const std::string& why) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < tensors_->size(); ++i) {
    tensors.push_back(AsTensor((*tensors_)[i].name, params_[i]));
  }
  TRAINER_CHECK_OK(
      absl::StrCat("pulling parameters version ", version, " (", why, ")"),
      client_->PullParameters(version, tensors));
  absl::Span<float> host(host_params_);
  for (size_t i = 0; i < tensors_->size(); ++i) {
    const train::TensorInfo& t = (*tensors_)[i];
    FromPool(options_.dtype, params_[i], host.subspan(t.offset, t.elements));
  }
  TRAINER_CHECK_OK("setting the model's parameters",
                   model_->SetParameters(host_params_));
  return absl::OkStatus();
}

absl::Status Trainer::Begin() {
  const size_t p = model_->parameter_count();
  absl::StatusOr<std::vector<PoolTensor>> set =
      AllocateSet(*client_, options_.dtype, *tensors_, p);
  if (!set.ok()) return Failed("allocating the parameters", set.status());
  params_ = std::move(*set);

  // The initial parameters: from the chosen worker(s), in a run that starts
  // now (a worker taking a missing one's place pulls the current ones).
  const InitFrom& init = options_.init_from;
  const bool supply =
      client_->first_step() == 0 &&
      (init.kind == InitFrom::Kind::kAll ||
       (init.kind == InitFrom::Kind::kWorker && client_->rank() == init.rank &&
        client_->worker_index() == init.index));
  if (supply) {
    absl::StatusOr<std::vector<PoolTensor>> init_set =
        AllocateSet(*client_, options_.dtype, *tensors_, p);
    if (!init_set.ok()) {
      return Failed("allocating the initial parameters", init_set.status());
    }
    std::vector<float> values(p);
    model_->InitParameters(options_.seed, absl::MakeSpan(values));
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < tensors_->size(); ++i) {
      const train::TensorInfo& t = (*tensors_)[i];
      ToPool(options_.dtype,
             absl::MakeConstSpan(values).subspan(t.offset, t.elements),
             (*init_set)[i]);
      tensors.push_back(AsTensor(t.name, (*init_set)[i]));
    }
    TRAINER_CHECK_OK("setting the initial parameters",
                     client_->SetInitialParameters(tensors));
  }
  // The first pull ends the declarations; first_step() is final then.
  STARLING_RETURN_IF_ERROR(Pull(client_->first_step(), "the first step"));
  first_step_ = client_->first_step();
  mode_ = client_->mode();
  staleness_ = mode_ == "async_sgd" ? client_->staleness() : 0;
  if (client_->job().elastic) {
    if (options_.dtype != DataType::kFloat32) {
      return Failed("starting " + mode_,
                    absl::UnimplementedError(absl::StrCat(
                        "the EASGD modes keep float32 parameters on the "
                        "workers; --dtype=",
                        client::DataTypeName(options_.dtype),
                        " is for the synchronous and parameter-server modes")));
    }
    if (first_step_ != 0) {
      return Failed(
          "starting " + mode_,
          absl::UnimplementedError(
              "a worker cannot take a missing one's place in an EASGD run "
              "(its own parameters left with it); start the run again"));
    }
    absl::StatusOr<std::unique_ptr<ElasticWorker>> elastic =
        ElasticWorker::Create(client_.get(), tensors_, host_params_,
                              WorkerNumber(), options_.timeout);
    if (!elastic.ok()) return Failed("starting " + mode_, elastic.status());
    elastic_ = std::move(*elastic);
    // One model's worth every tau steps.
    push_bytes_per_step_ =
        static_cast<int64_t>(p * sizeof(float)) / elastic_->tau();
  }

  for (int s = 0; s <= staleness_; ++s) {
    absl::StatusOr<std::vector<PoolTensor>> g =
        AllocateSet(*client_, options_.dtype, *tensors_, p);
    if (!g.ok()) {
      return Failed(absl::StrCat("allocating gradient set ", s + 1, " of ",
                                 staleness_ + 1),
                    g.status());
    }
    grads_.push_back(std::move(*g));
  }
  pushes_.resize(grads_.size());
  // The sums, then one slot per worker for its maximum staleness (the
  // others add zeros: every worker learns every maximum).
  absl::StatusOr<absl::Span<float>> sums =
      client_->Allocate(kSums + client_->total_workers());
  if (!sums.ok()) {
    return Failed("allocating the evaluation buffer", sums.status());
  }
  sums_buffer_ = *sums;

  absl::StatusOr<client::Schedule> schedule = FetchSchedule(first_step_);
  if (!schedule.ok()) return schedule.status();
  epochs_ = schedule->epochs;
  iterations_per_epoch_ = schedule->iterations_per_epoch;
  partitions_per_epoch_ = schedule->partitions_per_epoch;
  total_steps_ = epochs_ * iterations_per_epoch_;
  const int64_t want = train::NumPartitions(train_.size(), options_.batch_size);
  if (static_cast<int64_t>(partitions_per_epoch_) != want) {
    return Failed(
        "checking the schedule",
        absl::FailedPreconditionError(absl::StrCat(
            "the coordinator's schedule has ", partitions_per_epoch_,
            " partitions per epoch, but ", train_.size(),
            " training samples in batches of ", options_.batch_size, " make ",
            want, ": start starling-coordinator with --partitions_per_epoch=",
            want, " (or change --batch_size / --train_limit)")));
  }
  const size_t k = schedule->iterations.size();
  for (client::ScheduledIteration& it : schedule->iterations) {
    schedule_[it.iteration] = std::move(it);
  }
  schedule_done_ = schedule->done;

  std::printf(
      "starling-worker: rank %d worker %d (%d of %d workers, %d daemons), "
      "model %s (%zu parameters in %zu tensors), dtype %s, %d gradient "
      "bucket(s) %s, device %s\n",
      client_->rank(), client_->worker_index(), WorkerNumber(),
      client_->total_workers(), client_->group_size(),
      std::string(train::ModelKindName(options_.model)).c_str(), p,
      tensors_->size(),
      std::string(client::DataTypeName(options_.dtype)).c_str(), buckets_,
      options_.bucket_bytes == 0
          ? "(--bucket_bytes=0: pushed after backward)"
          : absl::StrCat("of <= ", options_.bucket_bytes, " bytes").c_str(),
      backend_->name().c_str());
  std::printf(
      "starling-worker: job: mode %s, staleness %d, %lld epochs of %lld "
      "iterations, %llu partitions per epoch (batch %d, %lld training and "
      "%lld test samples), K %zu, first step %lld\n",
      mode_.c_str(), staleness_,
      static_cast<long long>(epochs_),                // NOLINT(runtime/int)
      static_cast<long long>(iterations_per_epoch_),  // NOLINT(runtime/int)
      static_cast<unsigned long long>(                // NOLINT(runtime/int)
          partitions_per_epoch_),
      options_.batch_size,
      static_cast<long long>(train_.size()),    // NOLINT(runtime/int)
      static_cast<long long>(test_.size()),     // NOLINT(runtime/int)
      k, static_cast<long long>(first_step_));  // NOLINT(runtime/int)
  if (elastic_ != nullptr) {
    const client::Client::JobSettings& job = elastic_->job();
    std::printf(
        "starling-worker: elastic averaging: tau %d, alpha %.4g (beta / %d "
        "workers), local learning rate %.4g%s; test accuracy is the "
        "centre's\n",
        job.elastic_tau, job.elastic_alpha, client_->total_workers(),
        job.learning_rate,
        mode_ == "async_measgd"
            ? absl::StrCat(", Nesterov momentum ", job.elastic_momentum).c_str()
            : "");
  }
  if (Reporter()) {
    std::printf("%s\n", EpochTableHeader().c_str());
    // The table's CSV copy, from the same worker (the others' rows are the
    // same but for their own epoch times).
    if (!options_.epochs_table_path.empty()) {
      TRAINER_CHECK_OK("opening --epochs_table",
                       csv_.Open(options_.epochs_table_path));
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::StatusOr<const client::ScheduledIteration*> Trainer::Iteration(
    int64_t t) {
  auto it = schedule_.find(t);
  if (it != schedule_.end()) return &it->second;
  if (schedule_done_ || t >= total_steps_) return nullptr;
  absl::StatusOr<client::Schedule> schedule = FetchSchedule(t);
  if (!schedule.ok()) return schedule.status();
  schedule_.clear();
  for (client::ScheduledIteration& i : schedule->iterations) {
    schedule_[i.iteration] = std::move(i);
  }
  schedule_done_ = schedule->done;
  it = schedule_.find(t);
  if (it == schedule_.end()) return nullptr;
  return &it->second;
}

absl::StatusOr<client::Schedule> Trainer::FetchSchedule(int64_t next) {
  absl::StatusOr<client::Schedule> schedule = client_->GetSchedule(next);
  if (!schedule.ok()) {
    return Failed(absl::StrCat("getting the schedule from iteration ", next),
                  schedule.status());
  }
  return schedule;
}

const std::vector<int64_t>& Trainer::Order(int64_t epoch) {
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  orders_.erase(orders_.begin(), orders_.lower_bound(epoch));
  return orders_[epoch] =
             train::EpochOrder(options_.seed, epoch, train_.size());
}

absl::Status Trainer::WaitSlot(int slot) {
  for (const Future& f : pushes_[slot]) {
    TRAINER_CHECK_OK("pushing gradients", f.Wait(options_.timeout));
  }
  pushes_[slot].clear();
  return absl::OkStatus();
}

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
  TRAINER_CHECK_OK(absl::StrCat("forward of step ", t),
                   model_->Forward(x_.data(), batch));
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
  TRAINER_CHECK_OK(absl::StrCat("backward of step ", t),
                   model_->Backward(y_.data(), ready));
  return absl::OkStatus();
}

absl::Status Trainer::Step(const client::ScheduledIteration& it) {
  const int64_t t = it.iteration;
  const absl::Time step_start = absl::Now();
  if (elastic_ != nullptr) return ElasticStep(it, step_start);
  const int slot = static_cast<int>(t % SlotCount());
  // The daemon reads this set in place until its pushes completed.
  STARLING_RETURN_IF_ERROR(WaitSlot(slot));
  STARLING_RETURN_IF_ERROR(Pull(t, absl::StrCat("step ", t)));
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

  if (t == options_.exit_after_step) {
    STARLING_RETURN_IF_ERROR(WaitSlot(slot));
    std::printf("starling-worker: --exit_after_step=%lld: killing myself\n",
                static_cast<long long>(t));  // NOLINT(runtime/int)
    std::fflush(stdout);
    ::raise(SIGKILL);
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
  TRAINER_CHECK_OK("setting the model's parameters",
                   model_->SetParameters(host_params_));
  if (t == options_.exit_after_step) {
    TRAINER_CHECK_OK("the last elastic exchange", elastic_->Flush());
    std::printf("starling-worker: --exit_after_step=%lld: killing myself\n",
                static_cast<long long>(t));  // NOLINT(runtime/int)
    std::fflush(stdout);
    ::raise(SIGKILL);
  }
  StepDone(compute, absl::Now() - step_start);
  return absl::OkStatus();
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
  if (elastic_ != nullptr) {
    STARLING_RETURN_IF_ERROR(EvaluateCenter(last));
  } else if (last) {
    // Every push done and every worker past its last step: the final
    // parameters are the same on every worker.
    for (int s = 0; s < SlotCount(); ++s) {
      STARLING_RETURN_IF_ERROR(WaitSlot(s));
    }
    TRAINER_CHECK_OK("the barrier after the last step", client_->Barrier());
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
    TRAINER_CHECK_OK("setting the model's parameters",
                     model_->SetParameters(host_params_));
  }
  sums_[kTestLoss] = eval->loss_sum;
  sums_[kTestCorrect] = static_cast<double>(eval->correct);
  sums_[kTestCount] = static_cast<double>(eval->count);
  std::fill(sums_buffer_.begin(), sums_buffer_.end(), 0.0f);
  for (int i = 0; i < kSums; ++i) {
    sums_buffer_[i] = static_cast<float>(sums_[i]);
  }
  sums_buffer_[kSums + WorkerNumber()] = static_cast<float>(staleness_max_);
  TRAINER_CHECK_OK(absl::StrCat("all-reducing epoch ", epoch + 1, "'s counts"),
                   client_->AllReduce(sums_buffer_));
  const absl::Span<const float> s = sums_buffer_;
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
  TRAINER_CHECK_OK("writing --epochs_table", csv_.Append(row));
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
    TRAINER_CHECK_OK("waiting for the last elastic exchange",
                     elastic_->RefreshCenter());
    TRAINER_CHECK_OK("the barrier after the last step", client_->Barrier());
  }
  TRAINER_CHECK_OK("pulling the centre", elastic_->RefreshCenter());
  TRAINER_CHECK_OK("setting the centre for evaluation",
                   model_->SetParameters(elastic_->center()));
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

absl::Status Trainer::Run() {
  absl::Status status = Setup();
  if (status.ok()) status = Begin();
  if (!status.ok()) return status;
  start_ = last_progress_ = epoch_start_ = absl::Now();
  bool resumed_past_the_end = false;
  if (first_step_ > 0 && iterations_per_epoch_ > 0 &&
      first_step_ % iterations_per_epoch_ == 0) {
    // This worker replaces one that left at an epoch's end: the epoch's
    // evaluation (all-reduce; the last epoch's barrier first) is done
    // here unless that worker completed it (Client::resumed_collectives).
    const int64_t epoch = first_step_ / iterations_per_epoch_ - 1;
    const bool last = epoch == epochs_ - 1;
    const int needed = last ? 2 : 1;
    const int done = client_->resumed_collectives();
    if (done == 0) {
      STARLING_RETURN_IF_ERROR(EndEpoch(first_step_ - 1, epoch, last));
    } else if (done < needed) {
      return absl::FailedPreconditionError(absl::StrCat(
          "resuming at step ", first_step_,
          ": the worker replaced left in "
          "the middle of the final evaluation (",
          done, " of its ", needed, " collectives done); start the run again"));
    }
    resumed_past_the_end = last;
  }
  for (int64_t t = first_step_; !resumed_past_the_end; ++t) {
    absl::StatusOr<const client::ScheduledIteration*> it = Iteration(t);
    if (!it.ok()) return it.status();
    if (*it == nullptr) break;
    const client::ScheduledIteration& iteration = **it;
    STARLING_RETURN_IF_ERROR(Step(iteration));
    if (iteration.iteration_in_epoch == iterations_per_epoch_ - 1) {
      const bool last = iteration.epoch == epochs_ - 1;
      STARLING_RETURN_IF_ERROR(EndEpoch(t, iteration.epoch, last));
      if (last) break;
    } else {
      MaybeProgress(iteration);
    }
  }
  if (have_row_) {
    std::printf(
        "final: test accuracy %.2f%% (%lld/%lld), test loss %.4f after %lld "
        "epochs\n",
        100.0 * last_row_.test_accuracy,
        static_cast<long long>(last_row_.test_correct),         // NOLINT
        static_cast<long long>(last_row_.test_count),           // NOLINT
        last_row_.test_loss, static_cast<long long>(epochs_));  // NOLINT
  }
  std::printf(
      "final: compute ratio %.3f (this worker: %.2f s compute of %.2f s in "
      "%lld steps)\n",
      total_step_ > 0 ? total_compute_ / total_step_ : 0.0, total_compute_,
      total_step_, static_cast<long long>(steps_done_));  // NOLINT
  std::fflush(stdout);
  STARLING_RETURN_IF_ERROR(WriteOut());
  TRAINER_CHECK_OK("finishing the run", client_->Finish());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTrainer(const TrainerOptions& options) {
  Trainer trainer(options);
  return trainer.Run();
}

}  // namespace trainer
}  // namespace starling
