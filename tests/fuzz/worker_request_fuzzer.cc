// libFuzzer harness for the node daemon's parser of what a worker sends:
// ParseWorkerRequest() (server/node/worker/worker_request_check.h), fed the
// bytes a worker writes to its unix socket.
//
// Input: byte 0 chooses the form: bit 0 set, the rest is one request
// payload as it is; clear, the rest is the socket's byte stream, cut into
// frames as WorkerSession::ReadLoop() reads them (server/base/
// framed_socket.h: a 4-byte little-endian length, at most kMaxFrameBytes,
// then that many bytes of serialized proto::WorkerRequest; a length above
// the limit or a frame cut short ends the connection). The parser is
// stateless, so every frame is parsed, also after a refused one.
//
// Besides crashes (ASan, UBSan), the harness checks what the rest of the
// daemon relies on for every request the parser accepts: ids, names,
// steps and data types within their bounds; a declared tensor's element
// count computable without overflow, at most kMaxElements, and the same
// as proto::ElementsOf() computes; every slice ending inside the largest
// pool a worker may announce (offset + 4 * elements <= kMaxPoolBytes,
// computed without overflow); the accepted request reparsing to itself.
// A refusal is DataLoss exactly when protobuf cannot decode the bytes,
// InvalidArgument otherwise.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/common.pb.h"
#include "proto/worker.pb.h"
#include "server/base/tensor_table.h"
#include "server/node/worker/worker_request_check.h"

namespace starling {
namespace fuzz {
namespace {

// server/base/framed_socket.h's kMaxFrameBytes (that target is not
// visible here; the limit is part of the wire format, proto/worker.proto).
constexpr size_t kMaxFrameBytes = size_t{16} << 20;

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "worker_request_fuzzer: invariant broken: %s\n", what);
    std::abort();
  }
}

bool PrintableName(const std::string& name, size_t max_bytes) {
  if (name.size() > max_bytes) return false;
  for (unsigned char c : name) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

void CheckSlice(const proto::PoolSlice& slice, bool named,
                uint64_t element_bytes = sizeof(float)) {
  Check(PrintableName(slice.tensor(), node::kMaxTensorNameBytes),
        "accepted a slice whose tensor name is not printable or too long");
  Check(!named || !slice.tensor().empty(),
        "accepted a slice without a tensor name");
  Check(slice.elements() <= node::kMaxElements,
        "accepted a slice of more than kMaxElements");
  uint64_t bytes = 0;
  uint64_t end = 0;
  Check(!__builtin_mul_overflow(slice.elements(), element_bytes, &bytes) &&
            !__builtin_add_overflow(slice.offset_bytes(), bytes, &end),
        "an accepted slice's end overflows 64 bits");
  Check(end <= node::kMaxPoolBytes,
        "accepted a slice that ends past the largest pool (kMaxPoolBytes)");
}

void CheckSlices(
    const google::protobuf::RepeatedPtrField<proto::PoolSlice>& slices) {
  Check(slices.size() <= node::kMaxSlicesPerRequest,
        "accepted more than kMaxSlicesPerRequest slices");
  for (const proto::PoolSlice& slice : slices) CheckSlice(slice, true);
}

void CheckSpec(const proto::TensorSpec& spec) {
  Check(!spec.name().empty() &&
            PrintableName(spec.name(), node::kMaxTensorNameBytes),
        "accepted a tensor name that is empty, not printable or too long");
  Check(spec.shape_size() <= node::kMaxTensorRank,
        "accepted a tensor of more than kMaxTensorRank dimensions");
  // In declaration order, as the daemon and the coordinator multiply.
  uint64_t elements = 1;
  for (int64_t d : spec.shape()) {
    Check(d >= 0, "accepted a negative dimension");
    Check(
        !__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements),
        "an accepted shape's element count overflows 64 bits");
  }
  Check(elements <= node::kMaxElements,
        "accepted a tensor of more than kMaxElements");
  Check(proto::DataType_IsValid(spec.dtype()) &&
            spec.dtype() != proto::DATA_TYPE_UNSPECIFIED,
        "accepted an unknown data type");
  Check(proto::CheckTensorSpec(spec).ok(),
        "the daemon accepted a declaration the tensor table refuses");
  Check(proto::ElementsOf(spec) == elements,
        "ElementsOf disagrees with the checked element count");
}

void CheckAccepted(const proto::WorkerRequest& request) {
  Check(
      request.kind_case() == proto::WorkerRequest::kHello || request.id() != 0,
      "accepted id 0 outside hello");
  switch (request.kind_case()) {
    case proto::WorkerRequest::kHello: {
      const proto::HelloRequest& hello = request.hello();
      Check(PrintableName(hello.worker_name(), node::kMaxWorkerNameBytes) &&
                PrintableName(hello.version(), 64),
            "accepted a hello whose names are not printable or too long");
      Check(
          hello.pool_bytes() >= 1 && hello.pool_bytes() <= node::kMaxPoolBytes,
          "accepted a pool size outside 1..kMaxPoolBytes");
      break;
    }
    case proto::WorkerRequest::kDeclareTensor:
      CheckSpec(request.declare_tensor().spec());
      break;
    case proto::WorkerRequest::kPushGradients:
      Check(request.push_gradients().step() >= 0, "accepted a negative step");
      Check(request.push_gradients().bucket() >= 0,
            "accepted a negative bucket");
      Check(std::isfinite(request.push_gradients().compute_seconds()) &&
                request.push_gradients().compute_seconds() >= 0 &&
                std::isfinite(request.push_gradients().step_seconds()) &&
                request.push_gradients().step_seconds() >= 0,
            "accepted step times that are negative or not finite");
      CheckSlices(request.push_gradients().slices());
      break;
    case proto::WorkerRequest::kSchedule:
      Check(request.schedule().next_iteration() >= 0,
            "accepted a negative schedule iteration");
      break;
    case proto::WorkerRequest::kPullParameters:
      Check(request.pull_parameters().version() >= 0,
            "accepted a negative version");
      CheckSlices(request.pull_parameters().slices());
      break;
    case proto::WorkerRequest::kCollective: {
      const proto::CollectiveRequest& c = request.collective();
      Check(proto::CollectiveRequest::Kind_IsValid(c.kind()) &&
                c.kind() != proto::CollectiveRequest::KIND_UNSPECIFIED,
            "accepted a collective of an unknown kind");
      Check(proto::DataType_IsValid(c.dtype()) &&
                c.dtype() != proto::DATA_TYPE_UNSPECIFIED,
            "accepted a collective on an unknown data type");
      if (c.kind() == proto::CollectiveRequest::KIND_ALL_REDUCE ||
          c.kind() == proto::CollectiveRequest::KIND_REDUCE_SCATTER) {
        Check(proto::ReduceOp_IsValid(c.op()) &&
                  c.op() != proto::REDUCE_OP_UNSPECIFIED,
              "accepted a reduction with an unknown op");
      }
      Check(
          c.kind() != proto::CollectiveRequest::KIND_BROADCAST || c.root() >= 0,
          "accepted a broadcast from a negative slot");
      CheckSlice(c.slice(), /*named=*/false, proto::ElementBytes(c.dtype()));
      break;
    }
    case proto::WorkerRequest::kCommitTensors:
      CheckSlices(request.commit_tensors().initial_parameters());
      break;
    case proto::WorkerRequest::kBarrier:
    case proto::WorkerRequest::kFinish:
      break;
    case proto::WorkerRequest::KIND_NOT_SET:
      Check(false, "accepted a request of no kind");
      break;
  }
  // What the parser accepted, written again, is accepted again as the same
  // request (the client writes requests with the same code).
  const std::string again = request.SerializeAsString();
  absl::StatusOr<proto::WorkerRequest> reparsed =
      node::ParseWorkerRequest(again);
  Check(reparsed.ok(), "an accepted request, serialized again, is refused");
  Check(reparsed->SerializeAsString() == again,
        "an accepted request does not reparse to itself");
}

void ParseOne(absl::string_view payload) {
  absl::StatusOr<proto::WorkerRequest> request =
      node::ParseWorkerRequest(payload);
  proto::WorkerRequest decoded;
  const bool decodes =
      decoded.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
  if (!request.ok()) {
    Check(
        request.status().code() == (decodes ? absl::StatusCode::kInvalidArgument
                                            : absl::StatusCode::kDataLoss),
        "a refusal is neither DataLoss for undecodable bytes nor "
        "InvalidArgument for a decoded request");
    Check(!decodes || !node::CheckWorkerRequest(decoded).ok(),
          "ParseWorkerRequest and CheckWorkerRequest disagree");
    return;
  }
  Check(decodes, "accepted bytes protobuf cannot decode");
  Check(node::CheckWorkerRequest(*request).ok(),
        "CheckWorkerRequest refuses what ParseWorkerRequest accepted");
  CheckAccepted(*request);
}

void FuzzWorkerRequests(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const uint8_t mode = data[0];
  const absl::string_view rest(reinterpret_cast<const char*>(data + 1),
                               size - 1);
  if (mode & 1) {
    ParseOne(rest);
    return;
  }
  size_t at = 0;
  while (rest.size() - at >= 4) {
    const auto byte = [&](size_t i) {
      return static_cast<uint32_t>(static_cast<uint8_t>(rest[at + i]));
    };
    const uint32_t length =
        byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
    at += 4;
    // Beyond the limit: DataLoss, the daemon closes the connection.
    if (length > kMaxFrameBytes) return;
    // Cut short: the worker closed inside a frame.
    if (length > rest.size() - at) return;
    ParseOne(rest.substr(at, length));
    at += length;
  }
}

}  // namespace
}  // namespace fuzz
}  // namespace starling

// Protobuf logs every string field that is not UTF-8 as it refuses it:
// noise that slows the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  starling::fuzz::FuzzWorkerRequests(data, size);
  return 0;
}
