// Client and Future: thin wrappers over Connection (connection.h), which
// owns the socket, the pool and the reader thread. Each op checks its
// buffers here (in the pool, right size), ends the declarations if this is
// the first data op, and sends one request naming the buffers by offset.
#include "client/client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/connection.h"
#include "client/future_state.h"
#include "proto/common.pb.h"
#include "proto/data_type.h"
#include "proto/worker.pb.h"
#include "server/base/status_macros.h"

namespace starling {
namespace client {
namespace {

Future Failed(absl::Status status) {
  auto state = std::make_shared<internal::FutureState>("failed op");
  state->Complete(std::move(status));
  return Future(state);
}

// The pool slice of `data` for `tensor`; InvalidArgument naming the op and
// the tensor when the buffer is outside the pool.
absl::StatusOr<proto::PoolSlice> SliceOf(Connection* connection,
                                         absl::string_view op,
                                         absl::string_view tensor,
                                         absl::Span<const float> data) {
  std::optional<uint64_t> offset =
      connection->pool()->OffsetOf(data.data(), data.size() * sizeof(float));
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
  slice.set_elements(data.size());
  return slice;
}

absl::Status AddSlices(
    Connection* connection, absl::string_view op,
    const std::vector<Tensor>& tensors,
    google::protobuf::RepeatedPtrField<proto::PoolSlice>* out) {
  for (const Tensor& tensor : tensors) {
    STARLING_ASSIGN_OR_RETURN(uint64_t elements,
                              connection->ElementsOf(tensor.name));
    if (elements != tensor.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": tensor '", tensor.name, "' has ", elements,
                       " elements but its buffer holds ", tensor.data.size(),
                       " (", connection->where(), ")"));
    }
    STARLING_ASSIGN_OR_RETURN(
        *out->Add(), SliceOf(connection, op, tensor.name, tensor.data));
  }
  return absl::OkStatus();
}

}  // namespace

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
    : connection_(std::move(connection)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const ClientOptions& options) {
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection,
                            Connection::Open(options));
  return std::unique_ptr<Client>(new Client(std::move(connection)));
}

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
  STARLING_ASSIGN_OR_RETURN(uint64_t elements, connection_->ElementsOf(name));
  return connection_->pool()->AllocateFloats(elements);
}

Future Client::PushGradientsAsync(int64_t step,
                                  const std::vector<Tensor>& gradients) {
  const std::string what = absl::StrCat("push_gradients step ", step);
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Failed(Annotate(status, what));
  proto::WorkerRequest request;
  request.mutable_push_gradients()->set_step(step);
  status = AddSlices(connection_.get(), what, gradients,
                     request.mutable_push_gradients()->mutable_slices());
  if (!status.ok()) return Failed(status);
  return Future(connection_->Send(std::move(request), what));
}

absl::Status Client::PushGradients(int64_t step,
                                   const std::vector<Tensor>& gradients) {
  return PushGradientsAsync(step, gradients)
      .Wait(connection_->options().timeout);
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
  if (connection_->hello().mode() == proto::JobConfig::MODE_PARAMETER_SERVER) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     ": parameter-server mode has no views (the shard "
                     "owners update the parameters at any time); use "
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

Future Client::AllReduceAsync(absl::Span<float> data) {
  const std::string what =
      absl::StrCat("all_reduce of ", data.size(), " floats");
  absl::Status status = connection_->EnsureCommitted();
  if (!status.ok()) return Failed(Annotate(status, what));
  absl::StatusOr<proto::PoolSlice> slice =
      SliceOf(connection_.get(), what, "(all_reduce buffer)", data);
  if (!slice.ok()) return Failed(slice.status());
  proto::WorkerRequest request;
  *request.mutable_all_reduce()->mutable_slice() = *slice;
  return Future(connection_->Send(std::move(request), what));
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
