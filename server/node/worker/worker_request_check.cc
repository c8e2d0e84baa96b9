#include "server/node/worker/worker_request_check.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/base/proto_data_type.h"
#include "server/base/status_macros.h"

namespace starling {
namespace node {
namespace {

// Printable ASCII without control characters, so that names can go into
// logs and messages as they are.
absl::Status CheckName(absl::string_view what, const std::string& name,
                       size_t max_bytes, bool may_be_empty) {
  if (name.empty() && !may_be_empty) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  if (name.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", name.size(), " bytes long; at most ", max_bytes));
  }
  for (unsigned char c : name) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " contains the byte 0x", absl::Hex(c),
                       "; names are printable ASCII"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSpec(const proto::TensorSpec& spec) {
  STARLING_RETURN_IF_ERROR(
      CheckName("the tensor name", spec.name(), kMaxTensorNameBytes, false));
  if (spec.shape_size() > kMaxTensorRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name(), "' has ", spec.shape_size(),
                     " dimensions; at most ", kMaxTensorRank));
  }
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) {
    if (d < 0 || static_cast<uint64_t>(d) > kMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "': dimension ", d,
                       " is outside 0..", kMaxElements));
    }
    // Checked by division first: the product itself could overflow.
    if (d != 0 && elements > kMaxElements / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name(), "' has more than ",
                       kMaxElements, " elements"));
    }
    elements *= static_cast<uint64_t>(d);
  }
  if (!proto::DataTypeFromProto(spec.dtype()).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", spec.name(), "' has data type ",
                     static_cast<int>(spec.dtype()), ", not a known one"));
  }
  return absl::OkStatus();
}

absl::Status CheckSlice(const proto::PoolSlice& slice, bool named,
                        size_t element_bytes = sizeof(float)) {
  STARLING_RETURN_IF_ERROR(CheckName("the slice's tensor name", slice.tensor(),
                                     kMaxTensorNameBytes, !named));
  // The whole buffer, not just its start, must fit in the largest pool. The
  // first two tests keep the last one from overflowing.
  if (slice.elements() > kMaxElements || slice.offset_bytes() > kMaxPoolBytes ||
      slice.elements() * element_bytes > kMaxPoolBytes - slice.offset_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer of tensor '", slice.tensor(), "' (", slice.elements(), " x ",
        element_bytes, " bytes at pool offset ", slice.offset_bytes(),
        ") does not fit in any pool (at most ", kMaxPoolBytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCollective(const proto::CollectiveRequest& collective) {
  const auto kind = collective.kind();
  if (kind != proto::CollectiveRequest::KIND_ALL_REDUCE &&
      kind != proto::CollectiveRequest::KIND_BROADCAST &&
      kind != proto::CollectiveRequest::KIND_ALL_GATHER &&
      kind != proto::CollectiveRequest::KIND_REDUCE_SCATTER) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective of kind ", static_cast<int>(kind), ", not a known one"));
  }
  absl::StatusOr<DataType> type = proto::DataTypeFromProto(collective.dtype());
  if (!type.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "collective on data type ", static_cast<int>(collective.dtype()),
        ", not a known one"));
  }
  const bool reduces = kind == proto::CollectiveRequest::KIND_ALL_REDUCE ||
                       kind == proto::CollectiveRequest::KIND_REDUCE_SCATTER;
  if (reduces && !proto::ReduceOpFromProto(collective.op()).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective with reduce op ",
                     static_cast<int>(collective.op()), ", not a known one"));
  }
  if (kind == proto::CollectiveRequest::KIND_BROADCAST &&
      collective.root() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "broadcast from slot ", collective.root(), ": slots are >= 0"));
  }
  return CheckSlice(collective.slice(), false, DataTypeBytes(*type));
}

absl::Status CheckSlices(
    const google::protobuf::RepeatedPtrField<proto::PoolSlice>& slices) {
  if (slices.size() > kMaxSlicesPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat(slices.size(), " buffers in one request; at most ",
                     kMaxSlicesPerRequest));
  }
  for (const proto::PoolSlice& slice : slices) {
    STARLING_RETURN_IF_ERROR(CheckSlice(slice, true));
  }
  return absl::OkStatus();
}

absl::Status CheckStep(absl::string_view what, int64_t step) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", step, " is negative"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWorkerRequest(const proto::WorkerRequest& request) {
  if (request.kind_case() != proto::WorkerRequest::kHello &&
      request.id() == 0) {
    return absl::InvalidArgumentError("request id 0 is reserved for hello");
  }
  switch (request.kind_case()) {
    case proto::WorkerRequest::kHello: {
      const proto::HelloRequest& hello = request.hello();
      STARLING_RETURN_IF_ERROR(CheckName("the worker name", hello.worker_name(),
                                         kMaxWorkerNameBytes, true));
      if (hello.pool_bytes() == 0 || hello.pool_bytes() > kMaxPoolBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("hello announces a pool of ", hello.pool_bytes(),
                         " bytes; expected 1..", kMaxPoolBytes));
      }
      return CheckName("the client version", hello.version(), 64, true);
    }
    case proto::WorkerRequest::kDeclareTensor:
      return CheckSpec(request.declare_tensor().spec());
    case proto::WorkerRequest::kPushGradients: {
      const proto::PushGradientsRequest& push = request.push_gradients();
      STARLING_RETURN_IF_ERROR(CheckStep("push for step", push.step()));
      if (push.bucket() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "push for step ", push.step(), " names bucket ", push.bucket()));
      }
      if (!(push.compute_seconds() >= 0) || !(push.step_seconds() >= 0) ||
          !std::isfinite(push.compute_seconds()) ||
          !std::isfinite(push.step_seconds())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "push for step ", push.step(), " reports compute ",
            push.compute_seconds(), " s and step ", push.step_seconds(),
            " s: both must be finite and >= 0"));
      }
      if (push.samples() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("push for step ", push.step(), " reports ",
                         push.samples(), " samples: must be >= 0"));
      }
      if (push.has_accuracy() &&
          !(push.accuracy() >= 0 && push.accuracy() <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("push for step ", push.step(), " reports accuracy ",
                         push.accuracy(), ": must be a fraction in 0..1"));
      }
      return CheckSlices(push.slices());
    }
    case proto::WorkerRequest::kPullParameters:
      STARLING_RETURN_IF_ERROR(CheckStep("pull of parameter version",
                                         request.pull_parameters().version()));
      return CheckSlices(request.pull_parameters().slices());
    case proto::WorkerRequest::kCollective:
      return CheckCollective(request.collective());
    case proto::WorkerRequest::kSchedule:
      return CheckStep("schedule request from iteration",
                       request.schedule().next_iteration());
    case proto::WorkerRequest::kCommitTensors:
      return CheckSlices(request.commit_tensors().initial_parameters());
    case proto::WorkerRequest::kBarrier:
    case proto::WorkerRequest::kFinish:
      return absl::OkStatus();
    case proto::WorkerRequest::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "request of no known kind (a newer client than this daemon?)");
}

absl::StatusOr<proto::WorkerRequest> DecodeWorkerRequest(
    absl::string_view bytes) {
  proto::WorkerRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError(
        absl::StrCat("unparsable worker request (", bytes.size(), " bytes)"));
  }
  return request;
}

absl::StatusOr<proto::WorkerRequest> ParseWorkerRequest(
    absl::string_view bytes) {
  STARLING_ASSIGN_OR_RETURN(proto::WorkerRequest request,
                            DecodeWorkerRequest(bytes));
  STARLING_RETURN_IF_ERROR(CheckWorkerRequest(request));
  return request;
}

}  // namespace node
}  // namespace starling
