#include "worker/trainer/elastic.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/base/status_macros.h"

namespace starling {
namespace trainer {
namespace {

absl::Status Annotated(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(),
                      absl::StrCat(what, ": ", status.message()));
}

}  // namespace

ElasticWorker::ElasticWorker(client::Client* client,
                             const std::vector<train::TensorInfo>* tensors,
                             client::Client::JobSettings job, int worker_number,
                             absl::Duration timeout)
    : client_(client),
      tensors_(tensors),
      job_(std::move(job)),
      worker_number_(worker_number),
      timeout_(timeout) {}

absl::StatusOr<std::unique_ptr<ElasticWorker>> ElasticWorker::Create(
    client::Client* client, const std::vector<train::TensorInfo>* tensors,
    absl::Span<const float> center, int worker_number, absl::Duration timeout) {
  client::Client::JobSettings job = client->job();
  if (!job.elastic) {
    return absl::FailedPreconditionError(
        absl::StrCat("the job's mode ", job.mode, " is not an EASGD mode"));
  }
  if (job.elastic_tau < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job's elastic tau is ", job.elastic_tau,
                     "; it must be >= 1 (starling-coordinator --elastic_tau)"));
  }
  std::unique_ptr<ElasticWorker> worker(new ElasticWorker(
      client, tensors, std::move(job), worker_number, timeout));
  worker->sync_ = worker->job_.mode == "sync_easgd";
  worker->round_robin_ = worker->job_.mode == "round_robin_easgd";
  worker->momentum_ = worker->job_.mode == "async_measgd";
  worker->center_.assign(center.begin(), center.end());
  if (worker->momentum_) worker->velocity_.assign(center.size(), 0.0f);
  STARLING_ASSIGN_OR_RETURN(
      worker->push_, AllocateSet(*client, client::DataType::kFloat32, *tensors,
                                 center.size()));
  STARLING_ASSIGN_OR_RETURN(
      worker->pull_, AllocateSet(*client, client::DataType::kFloat32, *tensors,
                                 center.size()));
  return worker;
}

std::vector<client::Tensor> ElasticWorker::Tensors(
    const std::vector<PoolTensor>& set) {
  std::vector<client::Tensor> out;
  for (size_t i = 0; i < tensors_->size(); ++i) {
    out.push_back(AsTensor((*tensors_)[i].name, set[i]));
  }
  return out;
}

void ElasticWorker::LocalStep(absl::Span<float> x, absl::Span<const float> g) {
  const float lr = static_cast<float>(job_.learning_rate);
  const size_t n = x.size();
  if (!momentum_) {
    for (size_t i = 0; i < n; ++i) x[i] -= lr * g[i];
    return;
  }
  const float delta = static_cast<float>(job_.elastic_momentum);
  float* v = velocity_.data();
  for (size_t i = 0; i < n; ++i) {
    v[i] = delta * v[i] + g[i];
    x[i] -= lr * (g[i] + delta * v[i]);
  }
}

absl::Status ElasticWorker::Flush() {
  for (const client::Future& f : pending_) {
    STARLING_RETURN_IF_ERROR(f.Wait(timeout_));
  }
  pending_.clear();
  return absl::OkStatus();
}

bool ElasticWorker::Rejoined(int64_t group_version, int64_t next_step,
                             absl::Span<float> x) {
  pending_.clear();
  job_ = client_->job();
  worker_number_ =
      client_->rank() * client_->local_workers() + client_->worker_index();
  turn_base_ = group_version;
  // The first exchange after step next_step - 1: the smallest k with
  // (k + 1) * tau - 1 >= next_step.
  const int64_t tau = job_.elastic_tau;
  first_exchange_ = (next_step + 1 + tau - 1) / tau - 1;
  if (!sync_) return false;
  push_offset_ = group_version - first_exchange_;
  refresh_center_ = true;
  if (last_push_ < group_version) return false;
  // The last exchange's d is still in the pool (nothing wrote it since).
  for (size_t i = 0; i < tensors_->size(); ++i) {
    const train::TensorInfo& info = (*tensors_)[i];
    const float* d = push_[i].f32.data();
    float* xi = x.data() + info.offset;
    for (size_t j = 0; j < info.elements; ++j) xi[j] += d[j];
  }
  last_push_ = -1;
  return true;
}

absl::Status ElasticWorker::PullCenter(int64_t version) {
  STARLING_RETURN_IF_ERROR(client_->PullParameters(version, Tensors(pull_)));
  for (size_t i = 0; i < tensors_->size(); ++i) {
    const train::TensorInfo& t = (*tensors_)[i];
    std::copy(pull_[i].f32.begin(), pull_[i].f32.end(),
              center_.begin() + t.offset);
  }
  return absl::OkStatus();
}

absl::Status ElasticWorker::MaybeExchange(int64_t t, absl::Span<float> x) {
  const int tau = job_.elastic_tau;
  if ((t + 1) % tau != 0) return absl::OkStatus();
  const int64_t k = (t + 1) / tau - 1;
  // sync_easgd pushes exchange k as this step (k until a rejoin).
  const int64_t step = k + push_offset_;
  const std::string what = absl::StrCat("elastic exchange ", k, " (after step ",
                                        t, ", ", job_.mode, ")");
  // The buffer is the daemon's to read until the last push completed.
  absl::Status pushed = Flush();
  if (!pushed.ok()) {
    return Annotated(pushed, absl::StrCat(what, ": the previous push"));
  }
  if (sync_ && refresh_center_) {
    absl::Status pulled = PullCenter(step);
    if (!pulled.ok()) {
      return Annotated(pulled, absl::StrCat(what, ": pulling the centre"));
    }
    refresh_center_ = false;
  }
  if (!sync_) {
    // round_robin: the daemons hold this pull until every exchange before
    // this worker's turn was applied.
    const int64_t version =
        round_robin_
            ? turn_base_ + (k - first_exchange_) * client_->total_workers() +
                  worker_number_
            : 0;
    absl::Status pulled = PullCenter(version);
    if (!pulled.ok()) {
      return Annotated(pulled, absl::StrCat(what, ": pulling the centre"));
    }
  }
  const float alpha = static_cast<float>(job_.elastic_alpha);
  for (size_t i = 0; i < tensors_->size(); ++i) {
    const train::TensorInfo& info = (*tensors_)[i];
    float* d = push_[i].f32.data();
    float* xi = x.data() + info.offset;
    const float* c = center_.data() + info.offset;
    for (size_t j = 0; j < info.elements; ++j) {
      d[j] = alpha * (xi[j] - c[j]);
      xi[j] -= d[j];
    }
  }
  pending_.push_back(client_->PushGradientsAsync(step, Tensors(push_)));
  last_push_ = step;
  ++exchanges_;
  if (sync_) {
    absl::Status pulled = PullCenter(step + 1);
    if (!pulled.ok()) {
      return Annotated(pulled, absl::StrCat(what, ": pulling the new centre"));
    }
  }
  return absl::OkStatus();
}

absl::Status ElasticWorker::RefreshCenter() {
  STARLING_RETURN_IF_ERROR(Flush());
  if (!sync_) return PullCenter(0);
  if (!refresh_center_) return absl::OkStatus();
  STARLING_RETURN_IF_ERROR(PullCenter(first_exchange_ + push_offset_));
  refresh_center_ = false;
  return absl::OkStatus();
}

}  // namespace trainer
}  // namespace starling
