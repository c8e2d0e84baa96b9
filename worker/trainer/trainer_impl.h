// The Trainer class behind RunTrainer (trainer.h), private to
// //worker/trainer: trainer.cc sets up, begins and runs; trainer_step.cc
// holds the step, the EASGD step and the epoch's end.
#ifndef STARLING_WORKER_TRAINER_TRAINER_IMPL_H_
#define STARLING_WORKER_TRAINER_TRAINER_IMPL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "worker/train/backend.h"
#include "worker/train/dataset.h"
#include "worker/train/model.h"
#include "worker/trainer/elastic.h"
#include "worker/trainer/pool_tensors.h"
#include "worker/trainer/report.h"
#include "worker/trainer/trainer.h"

namespace starling {
namespace trainer {
namespace internal {

using client::Client;
using client::DataType;
using client::Future;
using client::Tensor;

// "<what>: <CODE>: <message>" (what main prints after "starling-worker: "),
// or OK for an OK `status`: STARLING_RETURN_IF_ERROR(Failed(what, expr)).
inline absl::Status Failed(absl::string_view what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.ToString()));
}

class Trainer {
 public:
  explicit Trainer(const TrainerOptions& options) : options_(options) {}
  absl::Status Run();

 private:
  absl::Status Setup();
  absl::Status Begin();
  // Begin's parts: the initial parameters from the chosen worker(s) in a
  // run that starts now (a worker taking a missing one's place pulls the
  // current ones); the EASGD worker; the gradient sets and the evaluation
  // buffer; the first schedule (checked against the data; returns the
  // iterations it holds); the start-up lines. `p`: parameter count.
  absl::Status SupplyInitialParameters(size_t p);
  absl::Status StartElastic(size_t p);
  absl::Status AllocateBuffers(size_t p);
  absl::StatusOr<size_t> TakeFirstSchedule();
  void PrintBanner(size_t p, size_t scheduled);
  // Iteration t of the schedule (fetched as needed), or null past the end.
  // In the shard owners' modes a re-formed group's plan may begin after t
  // (another worker ran ahead): then its first iteration.
  absl::StatusOr<const client::ScheduledIteration*> Iteration(int64_t t);
  absl::StatusOr<client::Schedule> FetchSchedule(int64_t next);
  absl::Status Step(const client::ScheduledIteration& it);
  // After step t (or the evaluation after it) failed with `why`: rejoins
  // the run where it goes on (sync_sgd and the shard owners' modes but
  // round-robin, --rejoins left); sets *resume to the step to train next.
  // Returns `why` when the worker cannot rejoin.
  absl::Status Rejoin(int64_t t, const absl::Status& why, int64_t* resume);
  // Rejoin's first collective in the re-formed group: the largest number
  // of epochs any worker evaluated becomes this worker's
  // (epochs_evaluated_), and the largest step any goes on at its `*resume`.
  absl::Status AlignWorkers(int64_t* resume);
  // The samples of iteration `it` for this worker.
  std::vector<int64_t> Samples(const client::ScheduledIteration& it);
  // Forward, loss and backward of step t on `samples` (not empty), calling
  // `ready` as each layer's gradients are done; adds to the epoch's sums.
  absl::Status ForwardBackward(int64_t t, const std::vector<int64_t>& samples,
                               const train::GradientsReadyCallback& ready);
  // Step() in the EASGD modes: local step, then the elastic exchange.
  absl::Status ElasticStep(const client::ScheduledIteration& it,
                           absl::Time step_start);
  // --exit_after_step: SIGKILL, as a crash would (after step t's pushes).
  void KillMyself(int64_t t);
  // Records one step's times.
  void StepDone(absl::Duration compute, absl::Duration step);
  // The EASGD modes' evaluation parameters: the centre.
  absl::Status EvaluateCenter(bool last);
  absl::Status WaitSlot(int slot);
  absl::Status Pull(int64_t version, const std::string& why);
  absl::Status EndEpoch(int64_t last_step, int64_t epoch, bool last);
  // EndEpoch, rejoining when the group re-forms under it: the evaluation
  // is done again in the re-formed group (every survivor's worker does it
  // again or reaches it) unless the group did it (AlignWorkers). Where the
  // group goes on at another step than the next, `*retrain_from` is that
  // step (-1 otherwise): before the epoch's end (sync SGD rolled steps
  // back), the epoch is evaluated when its last step is trained again.
  absl::Status EvaluateEpoch(int64_t last_step, int64_t epoch, bool last,
                             int64_t* retrain_from);
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
  int rejoins_left_ = 0;
  // Epochs whose evaluation this worker did or the group did for it
  // (AlignWorkers): epoch e is evaluated at its end iff e >= this.
  int64_t epochs_evaluated_ = 0;
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
  // --phase_times, this epoch: seconds waiting for pushes, pulling, setting
  // the model's parameters (part of pulling), computing; and the steps.
  double phase_wait_ = 0, phase_pull_ = 0, phase_set_ = 0, phase_compute_ = 0;
  int64_t phase_steps_ = 0;
  double last_set_seconds_ = 0;
  EpochsCsv csv_;
  EpochRow last_row_;
  bool have_row_ = false;
};

}  // namespace internal
}  // namespace trainer
}  // namespace starling

#endif  // STARLING_WORKER_TRAINER_TRAINER_IMPL_H_
