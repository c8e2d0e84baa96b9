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
#include "worker/trainer/trainer_impl.h"

namespace starling {
namespace trainer {
namespace internal {

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
    STARLING_RETURN_IF_ERROR(
        Failed(absl::StrCat("declaring tensor ", t.name),
               client_->DeclareTensor(t.name, t.shape, options_.dtype)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Pull(int64_t version, const std::string& why) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < tensors_->size(); ++i) {
    tensors.push_back(AsTensor((*tensors_)[i].name, params_[i]));
  }
  STARLING_RETURN_IF_ERROR(Failed(
      absl::StrCat("pulling parameters version ", version, " (", why, ")"),
      client_->PullParameters(version, tensors)));
  absl::Span<float> host(host_params_);
  for (size_t i = 0; i < tensors_->size(); ++i) {
    const train::TensorInfo& t = (*tensors_)[i];
    FromPool(options_.dtype, params_[i], host.subspan(t.offset, t.elements));
  }
  const absl::Time set_start = absl::Now();
  STARLING_RETURN_IF_ERROR(Failed("setting the model's parameters",
                                  model_->SetParameters(host_params_)));
  last_set_seconds_ = absl::ToDoubleSeconds(absl::Now() - set_start);
  return absl::OkStatus();
}

absl::Status Trainer::Begin() {
  const size_t p = model_->parameter_count();
  absl::StatusOr<std::vector<PoolTensor>> set =
      AllocateSet(*client_, options_.dtype, *tensors_, p);
  if (!set.ok()) return Failed("allocating the parameters", set.status());
  params_ = std::move(*set);
  STARLING_RETURN_IF_ERROR(SupplyInitialParameters(p));
  // The first pull ends the declarations; first_step() is final then.
  STARLING_RETURN_IF_ERROR(Pull(client_->first_step(), "the first step"));
  first_step_ = client_->first_step();
  mode_ = client_->mode();
  staleness_ = mode_ == "async_sgd" ? client_->staleness() : 0;
  if (client_->job().elastic) STARLING_RETURN_IF_ERROR(StartElastic(p));
  STARLING_RETURN_IF_ERROR(AllocateBuffers(p));
  STARLING_ASSIGN_OR_RETURN(const size_t scheduled, TakeFirstSchedule());
  PrintBanner(p, scheduled);
  if (Reporter() && !options_.epochs_table_path.empty()) {
    // The table's CSV copy, from the same worker (the others' rows are the
    // same but for their own epoch times).
    STARLING_RETURN_IF_ERROR(Failed("opening --epochs_table",
                                    csv_.Open(options_.epochs_table_path)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::SupplyInitialParameters(size_t p) {
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
    STARLING_RETURN_IF_ERROR(Failed("setting the initial parameters",
                                    client_->SetInitialParameters(tensors)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::StartElastic(size_t p) {
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
  return absl::OkStatus();
}

absl::Status Trainer::AllocateBuffers(size_t p) {
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
  return absl::OkStatus();
}

absl::StatusOr<size_t> Trainer::TakeFirstSchedule() {
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
  if (schedule->total_iterations > 0) total_steps_ = schedule->total_iterations;
  return k;
}

void Trainer::PrintBanner(size_t p, size_t scheduled) {
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
      static_cast<long long>(train_.size()),            // NOLINT(runtime/int)
      static_cast<long long>(test_.size()),             // NOLINT(runtime/int)
      scheduled, static_cast<long long>(first_step_));  // NOLINT(runtime/int)
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
  if (Reporter()) std::printf("%s\n", EpochTableHeader().c_str());
  std::fflush(stdout);
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
  // A re-formed group's plan may have another length.
  if (schedule->total_iterations > 0) total_steps_ = schedule->total_iterations;
  it = schedule_.lower_bound(t);
  if (it == schedule_.end()) return nullptr;
  if (it->first != t) {
    std::printf(
        "starling-worker: the re-formed group's data schedule begins at "
        "iteration %lld: this worker goes on from there (was at %lld)\n",
        static_cast<long long>(it->first),
        static_cast<long long>(t));  // NOLINT
  }
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
    STARLING_RETURN_IF_ERROR(
        Failed("pushing gradients", f.Wait(options_.timeout)));
  }
  pushes_[slot].clear();
  return absl::OkStatus();
}

absl::Status Trainer::Rejoin(int64_t t, const absl::Status& why,
                             int64_t* resume) {
  // Every mode this trainer runs goes on in a re-formed group.
  absl::Status failed = why;
  while (true) {
    if (rejoins_left_ <= 0) return failed;
    --rejoins_left_;
    std::printf("starling-worker: step %lld: %s\n",
                static_cast<long long>(t),  // NOLINT(runtime/int)
                std::string(failed.message()).c_str());
    absl::StatusOr<Client::Rejoined> rejoined = client_->Rejoin();
    if (!rejoined.ok()) {
      return Failed(absl::StrCat("rejoining after step ", t, " failed (",
                                 failed.message(), ")"),
                    rejoined.status());
    }
    // The pushes in flight went with the old group; the schedule is the
    // new group's from the step the run goes on at.
    for (std::vector<Future>& pushes : pushes_) pushes.clear();
    schedule_.clear();
    schedule_done_ = false;
    absl::StatusOr<absl::Span<float>> sums =
        client_->Allocate(kSums + client_->total_workers());
    if (!sums.ok()) {
      return Failed("allocating the evaluation buffer", sums.status());
    }
    sums_buffer_ = *sums;
    // EASGD: its own parameters went on through local step t. The others:
    // the step the run goes on at (sync SGD), or this worker's next one.
    *resume = elastic_ != nullptr ? t + 1 : rejoined->next_step;
    // The group re-formed again meanwhile: once more.
    if (absl::Status aligned = AlignWorkers(resume); !aligned.ok()) {
      failed = aligned;
      continue;
    }
    if (elastic_ != nullptr) {
      if (elastic_->Rejoined(rejoined->group_version, *resume,
                             absl::MakeSpan(host_params_))) {
        std::printf(
            "starling-worker: the group rolled back this worker's last "
            "elastic exchange: its move towards the centre is undone\n");
        STARLING_RETURN_IF_ERROR(Failed("setting the model's parameters",
                                        model_->SetParameters(host_params_)));
      }
    } else {
      STARLING_RETURN_IF_ERROR(
          Pull(*resume, absl::StrCat("rejoined at step ", *resume)));
    }
    std::printf(
        "starling-worker: rejoined run %llu at step %lld as worker %d of "
        "rank %d of %d (%d workers); %lld pushed step(s) rolled back\n",
        static_cast<unsigned long long>(rejoined->run_id),  // NOLINT
        static_cast<long long>(*resume),                    // NOLINT
        client_->worker_index(), client_->rank(), client_->group_size(),
        client_->total_workers(),
        static_cast<long long>(rejoined->rolled_back));  // NOLINT
    std::fflush(stdout);
    return absl::OkStatus();
  }
}

// Every worker of the re-formed group calls this first after rejoining
// (its first collective there): each says how many epochs it evaluated and
// the step it goes on at, and all take the largest of each.
//   - An evaluation's all-reduce that the loss cut short may have returned
//     on some workers only; they went on and will not do it again, so
//     those that did not must skip it too, or every later collective would
//     pair with the wrong one.
//   - In the shard owners' modes workers run at their own pace: all go on
//     from the same step (one behind skips its local steps up to it), so
//     that they read the re-formed group's data plan from where it begins,
//     and round-robin's turns (counted by exchange) interleave again.
absl::Status Trainer::AlignWorkers(int64_t* resume) {
  const int workers = client_->total_workers();
  absl::StatusOr<absl::Span<float>> counts =
      client_->Allocate(2 * static_cast<size_t>(workers));
  if (!counts.ok()) {
    return Failed("allocating the rejoin agreement buffer", counts.status());
  }
  std::fill(counts->begin(), counts->end(), 0.0f);
  (*counts)[WorkerNumber()] = static_cast<float>(epochs_evaluated_);
  (*counts)[workers + WorkerNumber()] = static_cast<float>(*resume);
  STARLING_RETURN_IF_ERROR(
      Failed("agreeing on the epochs evaluated", client_->AllReduce(*counts)));
  const int64_t evaluated = static_cast<int64_t>(
      *std::max_element(counts->begin(), counts->begin() + workers));
  const int64_t step = static_cast<int64_t>(
      *std::max_element(counts->begin() + workers, counts->end()));
  if (evaluated > epochs_evaluated_) {
    std::printf(
        "starling-worker: epoch(s) %lld..%lld were evaluated by the group "
        "before the loss: not again here\n",
        static_cast<long long>(epochs_evaluated_ + 1),  // NOLINT
        static_cast<long long>(evaluated));             // NOLINT
    epochs_evaluated_ = evaluated;
  }
  if (step > *resume) {
    std::printf(
        "starling-worker: the group goes on at step %lld: this worker skips "
        "from step %lld to it\n",
        static_cast<long long>(step),      // NOLINT
        static_cast<long long>(*resume));  // NOLINT
    *resume = step;
  }
  return absl::OkStatus();
}

absl::Status Trainer::EvaluateEpoch(int64_t last_step, int64_t epoch, bool last,
                                    int64_t* retrain_from) {
  *retrain_from = -1;
  while (epoch >= epochs_evaluated_) {
    const absl::Status ended = EndEpoch(last_step, epoch, last);
    if (ended.ok()) {
      epochs_evaluated_ = epoch + 1;
      break;
    }
    int64_t resume = last_step + 1;
    STARLING_RETURN_IF_ERROR(Rejoin(last_step, ended, &resume));
    if (resume != last_step + 1) *retrain_from = resume;
    if (resume <= last_step) return absl::OkStatus();
    if (epoch >= epochs_evaluated_) {
      std::printf("starling-worker: evaluating epoch %lld again\n",
                  static_cast<long long>(epoch + 1));  // NOLINT(runtime/int)
    }
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
  rejoins_left_ = options_.rejoins;
  // Whether this worker trained a step yet: the epochs before its first
  // one's were evaluated (by the worker it replaces, if any).
  bool trained = false;
  bool finished = false;
  for (int64_t t = first_step_; !resumed_past_the_end && !finished; ++t) {
    absl::StatusOr<const client::ScheduledIteration*> it = Iteration(t);
    if (!it.ok()) {
      // The coordinator refuses a schedule request of a group that just
      // re-formed: rejoin (or end with the error where it cannot).
      int64_t resume = t;
      STARLING_RETURN_IF_ERROR(Rejoin(t - 1, it.status(), &resume));
      t = resume - 1;
      continue;
    }
    // A re-formed group's plan may begin past epoch ends this worker did
    // not reach (another worker ran ahead, in the shard owners' modes):
    // their evaluations still take place here, so that every worker takes
    // part in every epoch's all-reduce.
    const int64_t next_epoch = *it == nullptr ? epochs_ : (*it)->epoch;
    int64_t retrain_from = -1;
    while (trained && epochs_evaluated_ < next_epoch && !finished &&
           retrain_from < 0) {
      const int64_t epoch = epochs_evaluated_;
      const bool last = epoch == epochs_ - 1;
      STARLING_RETURN_IF_ERROR(
          EvaluateEpoch(t - 1, epoch, last, &retrain_from));
      if (retrain_from < 0) finished = last;
    }
    if (retrain_from >= 0) {
      t = retrain_from - 1;  // the loop's ++t trains that step next
      continue;
    }
    if (finished || *it == nullptr) break;
    const client::ScheduledIteration& iteration = **it;
    t = iteration.iteration;
    if (!trained) {
      epochs_evaluated_ = std::max(epochs_evaluated_, iteration.epoch);
      trained = true;
    }
    if (absl::Status stepped = Step(iteration); !stepped.ok()) {
      int64_t resume = t;
      STARLING_RETURN_IF_ERROR(Rejoin(t, stepped, &resume));
      t = resume - 1;  // the loop's ++t trains step `resume` next
      continue;
    }
    if (iteration.last_in_epoch) {
      const bool last = iteration.epoch == epochs_ - 1;
      STARLING_RETURN_IF_ERROR(
          EvaluateEpoch(t, iteration.epoch, last, &retrain_from));
      if (retrain_from >= 0) {
        t = retrain_from - 1;
        continue;
      }
      finished = last;
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
  STARLING_RETURN_IF_ERROR(Failed("finishing the run", client_->Finish()));
  return absl::OkStatus();
}

}  // namespace internal

absl::Status RunTrainer(const TrainerOptions& options) {
  internal::Trainer trainer(options);
  return trainer.Run();
}

}  // namespace trainer
}  // namespace starling
