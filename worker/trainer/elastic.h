// ElasticWorker: one worker's side of the EASGD modes (Zhang, Choromanska &
// LeCun 2015; You, Buluc & Demmel, SC'17). The worker keeps its own
// parameters x (the trainer's host vector) and the centre x~ it pulled
// last; the daemons hold x~, sharded (each owns its slice).
//
//   local step t:  x -= lr * g                      (SGD)
//                  v = delta * v + g; x -= lr * (g + delta * v)
//                                                   (async_measgd: Nesterov
//                                                    momentum, PyTorch's form)
//   after step t, when (t + 1) % tau == 0, exchange k = (t + 1) / tau - 1:
//     sync_easgd:   d = alpha (x - x~); x -= d; push d as step k (the daemons
//                   sum every worker's d, add it to their slice, all-gather);
//                   pull version k + 1: x~ += sum of the d's. Deterministic.
//                   (After a rejoin the exchanges are numbered from the
//                   version the re-formed group went on at: Rejoined.)
//     async_easgd, async_measgd, hogwild_easgd: pull x~ (whatever the owners
//                   hold); d = alpha (x - x~); x -= d; push d (the owners add
//                   it at once; hogwild: without serialising pushes).
//     round_robin_easgd: as async, but the pull is version
//                   k * workers + g (g this worker's number), which the
//                   daemons hold until every earlier exchange was applied:
//                   one worker at a time, in worker order.
// Every float operation is written out element by element in this order,
// so a single-process implementation of the same equations reproduces
// Sync EASGD bit for bit (tests/node:easgd_test).
//
// Pushes are asynchronous: an exchange's push completes while the next tau
// local steps run (waited for before the next exchange reuses the buffer).
//
// Thread-compatible.
#ifndef STARLING_WORKER_TRAINER_ELASTIC_H_
#define STARLING_WORKER_TRAINER_ELASTIC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "worker/train/model.h"
#include "worker/trainer/pool_tensors.h"

namespace starling {
namespace trainer {

class ElasticWorker {
 public:
  // `client` is borrowed; the run's declarations have ended (the first
  // pull was made) and `center` holds the parameters pulled then (version
  // 0: the initial x~, also the worker's initial x). FailedPrecondition
  // unless the job is in an EASGD mode; InvalidArgument for a tau < 1.
  static absl::StatusOr<std::unique_ptr<ElasticWorker>> Create(
      client::Client* client, const std::vector<train::TensorInfo>* tensors,
      absl::Span<const float> center, int worker_number,
      absl::Duration timeout);

  // One local step on `x` with the gradient `g` (the file comment).
  void LocalStep(absl::Span<float> x, absl::Span<const float> g);
  // The exchange that follows local step `t`, if any. Errors name the
  // exchange and the operation.
  absl::Status MaybeExchange(int64_t t, absl::Span<float> x);
  // Waits for the last exchange's push; then, in the asynchronous modes,
  // pulls the centre as the owners hold it (sync_easgd holds it already).
  absl::Status RefreshCenter();
  // Waits for the last exchange's push to complete.
  absl::Status Flush();
  // The client rejoined a re-formed group (Client::Rejoin) at
  // `group_version` and trains step `next_step` next: pushes in flight went
  // with the old group, alpha follows the new number of workers, and
  // round-robin's turns count from group_version in the new worker order.
  // The worker's own parameters `x` and the centre it holds stay; the next
  // exchange pulls the centre as the new group holds it.
  // sync_easgd: the next exchange is pushed as step group_version (the
  // centre's version the group went on at); an exchange of this worker's
  // that the group rolled back (its last push, when at or past
  // group_version) has its elastic move undone in `x` (x += d), so that
  // x and the centre move back together. Returns whether it was.
  bool Rejoined(int64_t group_version, int64_t next_step, absl::Span<float> x);

  const std::vector<float>& center() const { return center_; }
  int tau() const { return job_.elastic_tau; }
  const client::Client::JobSettings& job() const { return job_; }
  int64_t exchanges() const { return exchanges_; }

 private:
  ElasticWorker(client::Client* client,
                const std::vector<train::TensorInfo>* tensors,
                client::Client::JobSettings job, int worker_number,
                absl::Duration timeout);
  std::vector<client::Tensor> Tensors(const std::vector<PoolTensor>& set);
  absl::Status PullCenter(int64_t version);

  client::Client* const client_;
  const std::vector<train::TensorInfo>* const tensors_;
  client::Client::JobSettings job_;
  int worker_number_;
  const absl::Duration timeout_;
  bool sync_ = false, round_robin_ = false, momentum_ = false;
  std::vector<float> center_;
  std::vector<float> velocity_;   // async_measgd
  std::vector<PoolTensor> push_;  // d, in the pool
  std::vector<PoolTensor> pull_;  // x~, in the pool
  std::vector<client::Future> pending_;
  int64_t exchanges_ = 0;
  // round_robin: exchange k (k >= first_exchange_) pulls version
  // turn_base_ + (k - first_exchange_) * workers + worker number.
  int64_t turn_base_ = 0;
  int64_t first_exchange_ = 0;
  // sync_easgd: exchange k is pushed as step k + push_offset_ (0 until a
  // rejoin); the step of the last push (-1: none); whether the centre must
  // be pulled again (at the group's version, first_exchange_ +
  // push_offset_) before it is used.
  int64_t push_offset_ = 0;
  int64_t last_push_ = -1;
  bool refresh_center_ = false;
};

}  // namespace trainer
}  // namespace starling

#endif  // STARLING_WORKER_TRAINER_ELASTIC_H_
