// Client and Future: thin wrappers over Connection (connection.h), which
// owns the socket, the pool and the reader thread. Each op checks its
// buffers here (in the pool, right size), ends the declarations if this is
// the first data op, and sends one request naming the buffers by offset.
#include "client/client.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "client/future_state.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/base/describe_collective.h"
#include "server/base/float16.h"
#include "server/base/job_config_checks.h"
#include "server/base/proto_data_type.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace client {
namespace {

Future Failed(absl::Status status) {
  auto state = std::make_shared<internal::FutureState>("failed op");
  state->Complete(std::move(status));
  return Future(state);
}

// The pool slice of `bytes` for `tensor` (`elements` of it); InvalidArgument
// naming the op and the tensor when the buffer is outside the pool.
absl::StatusOr<proto::PoolSlice> SliceOf(Connection* connection,
                                         absl::string_view op,
                                         absl::string_view tensor,
                                         absl::Span<const std::byte> bytes,
                                         uint64_t elements) {
  std::optional<uint64_t> offset =
      connection->pool()->OffsetOf(bytes.data(), bytes.size());
  if (!offset.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the buffer of tensor '", tensor,
        "' is not in the client's shared-memory pool (take it from "
        "Allocate or AllocateTensor) (",
        connection->where(), ")"));
  }
  proto::PoolSlice slice;
  slice.set_tensor(std::string(tensor));
  slice.set_offset_bytes(*offset);
  slice.set_elements(elements);
  return slice;
}

// The slice of `tensor`, checked against its declaration (size and type).
absl::StatusOr<proto::PoolSlice> CheckedSlice(
    Connection* connection, absl::string_view op, const Tensor& tensor,
    Connection::Declared* found = nullptr) {
  STARLING_ASSIGN_OR_RETURN(const Connection::Declared declared,
                            connection->FindDeclared(tensor.name));
  if (found != nullptr) *found = declared;
  const uint64_t element_bytes = proto::ElementBytes(declared.dtype);
  if (element_bytes != tensor.element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": tensor '", tensor.name, "' is ",
        proto::DataTypeName(declared.dtype), " but its buffer holds ",
        tensor.element_bytes, "-byte elements (",
        element_bytes == 2 ? "use a uint16_t buffer: AllocateTensor16"
                           : "use a float buffer: AllocateTensor",
        ") (", connection->where(), ")"));
  }
  if (declared.elements != tensor.elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tensor '", tensor.name, "' has ", declared.elements,
                     " elements but its buffer holds ", tensor.elements(), " (",
                     connection->where(), ")"));
  }
  return SliceOf(connection, op, tensor.name, tensor.bytes, tensor.elements());
}

absl::Status AddSlices(
    Connection* connection, absl::string_view op,
    const std::vector<Tensor>& tensors,
    google::protobuf::RepeatedPtrField<proto::PoolSlice>* out) {
  for (const Tensor& tensor : tensors) {
    STARLING_ASSIGN_OR_RETURN(*out->Add(),
                              CheckedSlice(connection, op, tensor));
  }
  return absl::OkStatus();
}

// A future that completes once every one of `parts` did: with the first
// error among them, or OK.
Future AllOf(const std::string& what,
             const std::vector<std::shared_ptr<internal::FutureState>>& parts) {
  auto all = std::make_shared<internal::FutureState>(what);
  if (parts.empty()) {
    all->Complete(absl::OkStatus());
    return Future(all);
  }
  if (parts.size() == 1) return Future(parts[0]);
  auto left =
      std::make_shared<std::atomic<int>>(static_cast<int>(parts.size()));
  for (const auto& part : parts) {
    part->Then([all, left](const absl::Status& status) {
      if (!status.ok()) all->Complete(status);
      if (left->fetch_sub(1) == 1) all->Complete(absl::OkStatus());
    });
  }
  return Future(all);
}

}  // namespace

struct Client::Pending {
  absl::Mutex mu;
  // The step whose buckets are being assembled; -1: none.
  int64_t step ABSL_GUARDED_BY(mu) = -1;
  std::vector<bool> pushed ABSL_GUARDED_BY(mu);    // per tensor
  std::vector<int> remaining ABSL_GUARDED_BY(mu);  // tensors per bucket
  std::vector<std::vector<proto::PoolSlice>> slices ABSL_GUARDED_BY(mu);
  // Per bucket: completes when the daemon answered its push.
  std::vector<std::shared_ptr<internal::FutureState>> done ABSL_GUARDED_BY(mu);
  int next_bucket ABSL_GUARDED_BY(mu) = 0;
  // ReportStepTimes not sent yet.
  double compute_seconds ABSL_GUARDED_BY(mu) = 0;
  double step_seconds ABSL_GUARDED_BY(mu) = 0;
  // ReportProgress not sent yet.
  int64_t samples ABSL_GUARDED_BY(mu) = 0;
  std::optional<double> loss ABSL_GUARDED_BY(mu);
  std::optional<double> accuracy ABSL_GUARDED_BY(mu);

  // A bucket's push sent, and the future its bucket completes with.
  using SentBucket = std::pair<std::shared_ptr<internal::FutureState>,
                               std::shared_ptr<internal::FutureState>>;

  // InvalidArgument when `step` is pushed while another step still has
  // buckets to push; otherwise assembles `step` (if it is not already).
  absl::Status BeginStep(int64_t step, const std::string& what,
                         const Connection& connection, int buckets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (this->step != -1 && this->step != step) {
      std::vector<std::string> missing;
      for (size_t b = next_bucket; b < remaining.size(); ++b) {
        if (remaining[b] > 0) missing.push_back(absl::StrCat(b));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": step ", this->step, " is incomplete (tensors of bucket(s) ",
          absl::StrJoin(missing, ", "),
          " not pushed); a step's gradients are pushed before the next "
          "step's (",
          connection.where(), ")"));
    }
    if (this->step != -1) return absl::OkStatus();
    this->step = step;
    pushed.assign(connection.declared_count(), false);
    remaining = connection.TensorsPerBucket();
    remaining.resize(buckets, 0);
    slices.assign(buckets, {});
    done.clear();
    for (int b = 0; b < buckets; ++b) {
      done.push_back(std::make_shared<internal::FutureState>(
          absl::StrCat(what, " bucket ", b)));
    }
    next_bucket = 0;
    return absl::OkStatus();
  }

  // Sends every bucket of `step` that is complete and whose predecessors
  // were sent, in order (under the lock), with the progress not sent yet;
  // the caller links each to its future once the lock is released.
  std::vector<SentBucket> SendReadyBuckets(int64_t step,
                                           const std::string& what,
                                           Connection& connection, int buckets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<SentBucket> sent_buckets;
    while (next_bucket < buckets && remaining[next_bucket] <= 0) {
      const int b = next_bucket++;
      proto::WorkerRequest request;
      proto::PushGradientsRequest* push = request.mutable_push_gradients();
      push->set_step(step);
      push->set_bucket(b);
      push->set_parameters_version(connection.last_pulled_version());
      for (proto::PoolSlice& slice : slices[b]) {
        *push->add_slices() = std::move(slice);
      }
      if (step_seconds > 0) {
        push->set_compute_seconds(std::exchange(compute_seconds, 0.0));
        push->set_step_seconds(std::exchange(step_seconds, 0.0));
      }
      push->set_samples(std::exchange(samples, 0));
      if (loss.has_value()) push->set_loss(*std::exchange(loss, std::nullopt));
      if (accuracy.has_value()) {
        push->set_accuracy(*std::exchange(accuracy, std::nullopt));
      }
      std::shared_ptr<internal::FutureState> sent = connection.Send(
          std::move(request),
          buckets > 1 ? absl::StrCat(what, " bucket ", b) : what);
      sent_buckets.emplace_back(std::move(sent), done[b]);
    }
    if (next_bucket >= buckets) this->step = -1;
    return sent_buckets;
  }
};

Future::Future() : Future(nullptr) {}

Future::Future(std::shared_ptr<internal::FutureState> state)
    : state_(std::move(state)) {
  if (state_ == nullptr) {
    state_ = std::make_shared<internal::FutureState>("empty future");
    state_->Complete(absl::FailedPreconditionError("empty future"));
  }
}

bool Future::Poll() const { return state_->done(); }

absl::Status Future::Wait(absl::Duration timeout) const {
  return state_->Wait(absl::Now() + timeout);
}

absl::Status Future::Wait(absl::Time deadline) const {
  return state_->Wait(deadline);
}

void Future::Then(std::function<void(const absl::Status&)> callback) const {
  state_->Then(std::move(callback));
}

Client::Client(std::unique_ptr<Connection> connection)
    : connection_(std::move(connection)), pending_(new Pending) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection,
                            Connection::Open(options));
  return std::unique_ptr<Client>(new Client(std::move(connection)));
}

namespace {

// How long Rejoin asks again while its daemon still serves the group the
// worker's error came from (the daemon hears of a re-formation by its next
// heartbeat, every 250 ms by default).
constexpr absl::Duration kSameGroupWait = absl::Seconds(5);

}  // namespace

absl::StatusOr<Client::Rejoined> Client::Rejoin() {
  const uint64_t run_id = connection_->run_id();
  if (run_id == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        connection_->where(), " takes part in no run: nothing to rejoin"));
  }
  const ClientOptions options = connection_->options();
  const std::vector<proto::TensorSpec> specs = connection_->Declarations();
  const uint64_t epoch = connection_->hello().group_epoch();
  const absl::Time same_group_deadline =
      absl::Now() + std::min(kSameGroupWait, options.timeout);
  const absl::Time deadline = absl::Now() + options.timeout;
  while (true) {
    std::unique_ptr<SharedPool> pool = connection_->TakePool();
    // Closing first frees this worker's index on the daemon.
    connection_.reset();
    pending_ = std::make_unique<Pending>();
    STARLING_ASSIGN_OR_RETURN(connection_,
                              Connection::Open(options, std::move(pool)));
    // The coordinator may have re-formed the group a moment before this
    // daemon heard of it (until then the daemon holds the stopped run, or
    // none): asked again for a while, then taken as no re-formation at all.
    const bool same_group =
        epoch != 0 && connection_->hello().group_epoch() == epoch;
    if (same_group && absl::Now() < same_group_deadline) {
      absl::SleepFor(absl::Milliseconds(250));
      continue;
    }
    if (connection_->run_id() != run_id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "run ", run_id, " did not go on in the re-formed group (",
          connection_->where(),
          "); its daemons' logs and `starlingctl status` say why; this "
          "worker may declare the next run"));
    }
    if (same_group) {
      return absl::FailedPreconditionError(absl::StrCat(
          "run ", run_id, " still runs in group epoch ", epoch, " (",
          connection_->where(), ", asked for ",
          absl::FormatDuration(kSameGroupWait),
          "): no daemon was lost, so there is nothing to rejoin; the error "
          "that ended this worker's request was its own"));
    }
    absl::Status declared;
    for (const proto::TensorSpec& spec : specs) {
      declared = connection_->Declare(spec);
      if (!declared.ok()) break;
    }
    if (declared.ok()) declared = connection_->EnsureCommitted();
    if (declared.ok()) break;
    // The group re-formed again between the hello and the declarations
    // (the daemon stopped the run it had just resumed): once more, on the
    // same pool.
    if (!absl::IsUnavailable(declared) || absl::Now() >= deadline) {
      return declared;
    }
  }
  Rejoined rejoined;
  rejoined.run_id = run_id;
  rejoined.last_pushed = last_pushed_.load();
  rejoined.group_version = connection_->next_step();
  if (proto::UsesShardOwners(connection_->hello().mode())) {
    connection_->set_next_step(rejoined.last_pushed + 1);
  }
  rejoined.next_step = connection_->next_step();
  rejoined.rolled_back =
      std::max<int64_t>(0, rejoined.last_pushed + 1 - rejoined.next_step);
  rolled_back_.fetch_add(rejoined.rolled_back);
  last_pushed_.store(rejoined.next_step - 1);
  return rejoined;
}

int64_t Client::rolled_back_steps() const { return rolled_back_.load(); }

int Client::rank() const { return connection_->hello().rank(); }
int Client::group_size() const { return connection_->hello().group_size(); }
int Client::local_workers() const {
  return connection_->hello().local_workers();
}
int Client::total_workers() const { return connection_->total_workers(); }
int Client::worker_index() const { return connection_->options().worker_index; }
uint64_t Client::run_id() const { return connection_->run_id(); }
int64_t Client::first_step() const { return connection_->next_step(); }
const std::string& Client::daemon_address() const {
  return connection_->hello().daemon_address();
}

absl::Status Client::DeclareTensor(absl::string_view name,
                                   std::vector<int64_t> shape, DataType dtype) {
  proto::TensorSpec spec;
  spec.set_name(std::string(name));
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(proto::DataTypeToProto(dtype));
  return connection_->Declare(spec);
}

absl::StatusOr<absl::Span<float>> Client::Allocate(size_t elements) {
  return connection_->pool()->AllocateFloats(elements);
}

absl::StatusOr<absl::Span<float>> Client::AllocateTensor(
    absl::string_view name) {
  STARLING_ASSIGN_OR_RETURN(const Connection::Declared declared,
                            connection_->FindDeclared(name));
  if (proto::ElementBytes(declared.dtype) != sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is ", proto::DataTypeName(declared.dtype),
        ": allocate its buffer with AllocateTensor16 (", connection_->where(),
        ")"));
  }
  return connection_->pool()->AllocateFloats(declared.elements);
}

absl::StatusOr<absl::Span<uint16_t>> Client::AllocateTensor16(
    absl::string_view name) {
  STARLING_ASSIGN_OR_RETURN(const Connection::Declared declared,
                            connection_->FindDeclared(name));
  if (proto::ElementBytes(declared.dtype) != sizeof(uint16_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", name, "' is ", proto::DataTypeName(declared.dtype),
        ": AllocateTensor16 is for float16 and bfloat16 tensors (",
        connection_->where(), ")"));
  }
  STARLING_ASSIGN_OR_RETURN(
      absl::Span<float> floats,
      connection_->pool()->AllocateFloats((declared.elements + 1) / 2));
  return absl::Span<uint16_t>(reinterpret_cast<uint16_t*>(floats.data()),
                              declared.elements);
}

absl::Status Client::SetInitialParameters(const std::vector<Tensor>& values) {
  return InitialParameters(values, /*offered=*/false);
}

absl::Status Client::OfferInitialParameters(const std::vector<Tensor>& values) {
  return InitialParameters(values, /*offered=*/true);
}

absl::Status Client::InitialParameters(const std::vector<Tensor>& values,
                                       bool offered) {
  std::vector<proto::PoolSlice> slices;
  for (const Tensor& tensor : values) {
    STARLING_ASSIGN_OR_RETURN(proto::PoolSlice slice,
                              CheckedSlice(connection_.get(),
                                           offered ? "offer_initial_parameters"
                                                   : "set_initial_parameters",
                                           tensor));
    slices.push_back(std::move(slice));
  }
  return connection_->SetInitialParameters(std::move(slices), offered);
}

int Client::resumed_collectives() const {
  return connection_->hello().collectives_done();
}

std::string Client::mode() const {
  const proto::ModeInfo* info = proto::FindMode(connection_->hello().mode());
  return info != nullptr ? info->name : "sync_sgd";
}

Client::JobSettings Client::job() const {
  const proto::JobConfig& config = connection_->hello().job();
  JobSettings job;
  job.mode = mode();
  job.optimizer = config.optimizer();
  job.learning_rate = config.learning_rate();
  job.parameter_count = config.parameter_count();
  job.elastic = proto::IsElasticMode(connection_->hello().mode());
  if (job.elastic) {
    job.elastic_tau = config.elastic_tau();
    job.elastic_alpha =
        config.elastic_beta() / std::max(1, connection_->total_workers());
    job.elastic_momentum = config.elastic_momentum();
  }
  return job;
}

int Client::staleness() const {
  return connection_->hello().mode() == proto::JobConfig::MODE_ASYNC_SGD
             ? connection_->hello().staleness()
             : 0;
}

int64_t Client::last_pulled_version() const {
  return connection_->last_pulled_version();
}

absl::StatusOr<Schedule> Client::GetSchedule(int64_t next_iteration) {
  const std::string what =
      absl::StrCat("schedule from iteration ", next_iteration);
  STARLING_RETURN_IF_ERROR(Annotate(connection_->EnsureCommitted(), what));
  proto::WorkerRequest request;
  request.mutable_schedule()->set_next_iteration(next_iteration);
  auto state = connection_->Send(std::move(request), what);
  STARLING_RETURN_IF_ERROR(Future(state).Wait(connection_->options().timeout));
  const proto::WorkerResponse response = state->response();
  const proto::Schedule& from = response.schedule();
  Schedule schedule;
  schedule.done = from.done();
  schedule.iterations_per_epoch =
      static_cast<int64_t>(from.iterations_per_epoch());
  schedule.epochs = static_cast<int64_t>(from.epochs());
  schedule.partitions_per_epoch = from.partitions_per_epoch();
  schedule.total_iterations = static_cast<int64_t>(from.total_iterations());
  for (const proto::ScheduledIteration& it : from.iterations()) {
    ScheduledIteration mine;
    mine.iteration = static_cast<int64_t>(it.iteration());
    mine.epoch = static_cast<int64_t>(it.epoch());
    mine.iteration_in_epoch = static_cast<int64_t>(it.iteration_in_epoch());
    mine.last_in_epoch = it.last_in_epoch();
    for (const proto::PartitionAssignment& a : it.assignments()) {
      if (a.local_worker() != worker_index()) continue;
      mine.partitions.assign(a.partitions().begin(), a.partitions().end());
    }
    schedule.iterations.push_back(std::move(mine));
  }
  return schedule;
}

void ToFloat16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  FloatToHalfN(from.data(), to.data(), std::min(from.size(), to.size()));
}

void ToBFloat16(absl::Span<const float> from, absl::Span<uint16_t> to) {
  FloatToBFloat16N(from.data(), to.data(), std::min(from.size(), to.size()));
}

void FromFloat16(absl::Span<const uint16_t> from, absl::Span<float> to) {
  HalfToFloatN(from.data(), to.data(), std::min(from.size(), to.size()));
}

void FromBFloat16(absl::Span<const uint16_t> from, absl::Span<float> to) {
  BFloat16ToFloatN(from.data(), to.data(), std::min(from.size(), to.size()));
}

Future Client::Push(int64_t step, const std::vector<Tensor>& gradients,
                    bool complete_step) {
  const std::string what = absl::StrCat("push_gradients step ", step);
  int64_t pushed = last_pushed_.load(std::memory_order_relaxed);
  while (step > pushed && !last_pushed_.compare_exchange_weak(pushed, step)) {
  }
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Failed(Annotate(status, what));
  // Check every buffer before changing anything.
  struct Part {
    proto::PoolSlice slice;
    int index;
    int bucket;
  };
  std::vector<Part> parts;
  for (const Tensor& tensor : gradients) {
    Connection::Declared declared;
    absl::StatusOr<proto::PoolSlice> slice =
        CheckedSlice(connection_.get(), what, tensor, &declared);
    if (!slice.ok()) return Failed(slice.status());
    parts.push_back(Part{*std::move(slice), declared.index, declared.bucket});
  }
  const int buckets = std::max(1, connection_->buckets());
  Pending& p = *pending_;
  // Released before the sent buckets are linked to their futures: a reply
  // that came already completes them inline, with the user's callbacks.
  absl::ReleasableMutexLock lock(&p.mu);
  status = p.BeginStep(step, what, *connection_, buckets);
  if (!status.ok()) return Failed(status);
  for (const Part& part : parts) {
    if (part.index < static_cast<int>(p.pushed.size()) &&
        p.pushed[part.index]) {
      return Failed(absl::InvalidArgumentError(absl::StrCat(
          what, ": tensor '", part.slice.tensor(),
          "' was pushed twice for this step (", connection_->where(), ")")));
    }
  }
  std::vector<bool> touched(buckets, false);
  for (Part& part : parts) {
    if (part.index < static_cast<int>(p.pushed.size())) {
      p.pushed[part.index] = true;
    }
    --p.remaining[part.bucket];
    touched[part.bucket] = true;
    p.slices[part.bucket].push_back(std::move(part.slice));
  }
  if (complete_step) {
    for (int b = 0; b < buckets; ++b) {
      p.remaining[b] = 0;
      touched[b] = true;
    }
  }
  // Linked to their futures after the lock: a reply that came already
  // completes them inline, with the user's callbacks.
  const std::vector<Pending::SentBucket> sent_buckets =
      p.SendReadyBuckets(step, what, *connection_, buckets);
  std::vector<std::shared_ptr<internal::FutureState>> waits;
  for (int b = 0; b < buckets; ++b) {
    if (touched[b]) waits.push_back(p.done[b]);
  }
  lock.Release();
  for (auto& [sent, done] : sent_buckets) {
    sent->Then([done = done](const absl::Status& s) { done->Complete(s); });
  }
  return AllOf(what, waits);
}

Future Client::PushGradientsAsync(int64_t step,
                                  const std::vector<Tensor>& gradients) {
  return Push(step, gradients, /*complete_step=*/true);
}

Future Client::PushGradientsPartAsync(int64_t step,
                                      const std::vector<Tensor>& gradients) {
  return Push(step, gradients, /*complete_step=*/false);
}

absl::Status Client::PushGradients(int64_t step,
                                   const std::vector<Tensor>& gradients) {
  return PushGradientsAsync(step, gradients)
      .Wait(connection_->options().timeout);
}

void Client::ReportStepTimes(absl::Duration compute, absl::Duration step) {
  absl::MutexLock lock(&pending_->mu);
  pending_->compute_seconds += absl::ToDoubleSeconds(compute);
  pending_->step_seconds += absl::ToDoubleSeconds(step);
}

absl::Status Client::ReportProgress(int64_t samples, std::optional<double> loss,
                                    std::optional<double> accuracy) {
  if (samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report_progress: ", samples, " samples: must be >= 0"));
  }
  if (accuracy.has_value() && !(*accuracy >= 0 && *accuracy <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("report_progress: accuracy ", *accuracy,
                     ": must be a fraction in 0..1"));
  }
  absl::MutexLock lock(&pending_->mu);
  pending_->samples += samples;
  if (loss.has_value()) pending_->loss = loss;
  if (accuracy.has_value()) pending_->accuracy = accuracy;
  return absl::OkStatus();
}

Future Client::PullParametersAsync(int64_t version,
                                   const std::vector<Tensor>& parameters) {
  const std::string what = absl::StrCat("pull_parameters version ", version);
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Failed(Annotate(status, what));
  proto::WorkerRequest request;
  request.mutable_pull_parameters()->set_version(version);
  status = AddSlices(connection_.get(), what, parameters,
                     request.mutable_pull_parameters()->mutable_slices());
  if (!status.ok()) return Failed(status);
  return Future(connection_->Send(std::move(request), what));
}

absl::Status Client::PullParameters(int64_t version,
                                    const std::vector<Tensor>& parameters) {
  return PullParametersAsync(version, parameters)
      .Wait(connection_->options().timeout);
}

namespace {

// OK when `header` says the parameters hold `version`.
absl::Status CheckVersion(const SharedParametersHeader& header,
                          int64_t version) {
  const int64_t held = header.version.load(std::memory_order_acquire);
  if (held == version) return absl::OkStatus();
  if (held < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a view of parameter version ", version,
        " was asked, but the daemon is writing version ",
        header.writing.load(std::memory_order_acquire),
        " over the parameters (a view lasts until this worker's next push)"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "a view of parameter version ", version,
      " was asked, but the daemon's parameters hold version ", held,
      held > version ? " (a view shows the current version only)" : ""));
}

}  // namespace

absl::StatusOr<absl::Span<const float>> Client::ParametersView(
    int64_t version, absl::string_view tensor) {
  const std::string what =
      absl::StrCat("parameters_view of '", tensor, "' version ", version);
  if (proto::UsesShardOwners(connection_->hello().mode())) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": ", mode(),
                     " has no views (the shard "
                     "owners update the parameters at any time); use "
                     "PullParameters (",
                     connection_->where(), ")"));
  }
  if (connection_->hello().mode() == proto::JobConfig::MODE_ASYNC_SGD) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     ": async SGD has no views (the daemons update the "
                     "parameters while workers compute on older ones); use "
                     "PullParameters (",
                     connection_->where(), ")"));
  }
  STARLING_RETURN_IF_ERROR(Annotate(connection_->EnsureCommitted(), what));
  absl::StatusOr<Connection::SharedParameters> shared =
      connection_->shared_parameters();
  if (!shared.ok()) return Annotate(shared.status(), what);
  STARLING_ASSIGN_OR_RETURN(uint64_t offset, connection_->OffsetOf(tensor));
  STARLING_ASSIGN_OR_RETURN(uint64_t elements, connection_->ElementsOf(tensor));
  const absl::Span<const float> view(shared->parameters + offset, elements);
  const int64_t held = shared->header->version.load(std::memory_order_acquire);
  if (held == version) return view;  // the common case: no round trip
  if (held < version) {
    // Wait for the version as a pull does: a pull of no tensors copies
    // nothing.
    proto::WorkerRequest request;
    request.mutable_pull_parameters()->set_version(version);
    STARLING_RETURN_IF_ERROR(Future(connection_->Send(std::move(request), what))
                                 .Wait(connection_->options().timeout));
  }
  absl::Status current = CheckVersion(*shared->header, version);
  if (!current.ok()) {
    return Annotate(current,
                    absl::StrCat(what, " (", connection_->where(), ")"));
  }
  return view;
}

absl::Status Client::CheckParametersView(int64_t version) const {
  absl::StatusOr<Connection::SharedParameters> shared =
      connection_->shared_parameters();
  if (!shared.ok()) return shared.status();
  return CheckVersion(*shared->header, version);
}

Future Client::Collective(proto::CollectiveRequest collective,
                          absl::Span<std::byte> data, DataType type) {
  const size_t element_bytes = DataTypeBytes(type);
  const size_t elements = data.size() / element_bytes;
  collective.set_dtype(proto::DataTypeToProto(type));
  collective.mutable_slice()->set_elements(elements);
  const std::string what = DescribeCollective(collective);
  if (data.size() % element_bytes != 0) {
    return Failed(absl::InvalidArgumentError(absl::StrCat(
        what, ": ", data.size(), " bytes are not a whole number of ",
        DataTypeName(type), " elements (", connection_->where(), ")")));
  }
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Failed(Annotate(status, what));
  absl::StatusOr<proto::PoolSlice> slice =
      SliceOf(connection_.get(), what, "(collective buffer)", data, elements);
  if (!slice.ok()) return Failed(slice.status());
  *collective.mutable_slice() = *slice;
  proto::WorkerRequest request;
  *request.mutable_collective() = std::move(collective);
  return Future(connection_->Send(std::move(request), what));
}

Future Client::AllReduceAsync(absl::Span<std::byte> data, DataType type,
                              ReduceOp op, CollectiveOptions options) {
  proto::CollectiveRequest collective;
  collective.set_kind(proto::CollectiveRequest::KIND_ALL_REDUCE);
  collective.set_op(proto::ReduceOpToProto(op));
  collective.set_scratch(options.scratch);
  return Collective(std::move(collective), data, type);
}

Future Client::BroadcastAsync(absl::Span<std::byte> data, DataType type,
                              int root, CollectiveOptions options) {
  proto::CollectiveRequest collective;
  collective.set_kind(proto::CollectiveRequest::KIND_BROADCAST);
  collective.set_root(root);
  collective.set_scratch(options.scratch);
  return Collective(std::move(collective), data, type);
}

Future Client::AllGatherAsync(absl::Span<std::byte> data, DataType type) {
  proto::CollectiveRequest collective;
  collective.set_kind(proto::CollectiveRequest::KIND_ALL_GATHER);
  return Collective(std::move(collective), data, type);
}

Future Client::ReduceScatterAsync(absl::Span<std::byte> data, DataType type,
                                  ReduceOp op) {
  proto::CollectiveRequest collective;
  collective.set_kind(proto::CollectiveRequest::KIND_REDUCE_SCATTER);
  collective.set_op(proto::ReduceOpToProto(op));
  return Collective(std::move(collective), data, type);
}

int Client::slot() const { return rank() * local_workers() + worker_index(); }

Future Client::AllReduceAsync(absl::Span<float> data) {
  return AllReduceAsync(
      absl::MakeSpan(reinterpret_cast<std::byte*>(data.data()),
                     data.size() * sizeof(float)),
      DataType::kFloat32, ReduceOp::kSum);
}

absl::Status Client::AllReduce(absl::Span<float> data) {
  return AllReduceAsync(data).Wait(connection_->options().timeout);
}

absl::Status Client::Barrier() {
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Annotate(status, "barrier");
  proto::WorkerRequest request;
  request.mutable_barrier();
  return Future(connection_->Send(std::move(request), "barrier"))
      .Wait(connection_->options().timeout);
}

absl::Status Client::Finish() {
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Annotate(status, "finish");
  proto::WorkerRequest request;
  request.mutable_finish();
  status = Future(connection_->Send(std::move(request), "finish"))
               .Wait(connection_->options().timeout);
  if (status.ok()) connection_->ResetRun();
  return status;
}

}  // namespace client
}  // namespace starling
