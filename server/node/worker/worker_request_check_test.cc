#include "server/node/worker/worker_request_check.h"

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;

proto::WorkerRequest Declare(const std::string& name,
                             std::initializer_list<int64_t> shape) {
  proto::WorkerRequest request;
  request.set_id(7);
  proto::TensorSpec* spec = request.mutable_declare_tensor()->mutable_spec();
  spec->set_name(name);
  for (int64_t d : shape) spec->add_shape(d);
  spec->set_dtype(proto::DATA_TYPE_FLOAT32);
  return request;
}

TEST(WorkerRequestCheck, AcceptsAnOrdinaryDeclaration) {
  EXPECT_THAT(CheckWorkerRequest(Declare("layer1.weight", {256, 784})), IsOk());
}

TEST(WorkerRequestCheck, RefusesGarbageBytesAsDataLoss) {
  EXPECT_THAT(
      ParseWorkerRequest(std::string("\xff\xff\xff\xff\x0f", 5)).status(),
      StatusIs(absl::StatusCode::kDataLoss));
}

TEST(WorkerRequestCheck, RefusesShapesWhoseProductOverflows) {
  // 2^32 x 2^32 overflows 64 bits if multiplied unchecked.
  absl::Status status =
      CheckWorkerRequest(Declare("x", {int64_t{1} << 32, int64_t{1} << 32}));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("tensor 'x'"));
}

TEST(WorkerRequestCheck, RefusesNegativeDimensionsNamingThem) {
  absl::Status status = CheckWorkerRequest(Declare("x", {4, -1}));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("dimension -1"));
}

TEST(WorkerRequestCheck, RefusesControlCharactersInNames) {
  EXPECT_THAT(CheckWorkerRequest(Declare(std::string("a\nb"), {1})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkerRequestCheck, RefusesUnknownDataTypes) {
  proto::WorkerRequest request = Declare("x", {1});
  request.mutable_declare_tensor()->mutable_spec()->set_dtype(
      static_cast<proto::DataType>(99));
  EXPECT_THAT(CheckWorkerRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkerRequestCheck, RefusesIdZeroOutsideHello) {
  proto::WorkerRequest request;
  request.mutable_barrier();
  EXPECT_THAT(CheckWorkerRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkerRequestCheck, RefusesNegativeSteps) {
  proto::WorkerRequest request;
  request.set_id(1);
  request.mutable_push_gradients()->set_step(-3);
  absl::Status status = CheckWorkerRequest(request);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("-3"));
}

TEST(WorkerRequestCheck, ChecksReportedProgress) {
  proto::WorkerRequest request;
  request.set_id(1);
  proto::PushGradientsRequest* push = request.mutable_push_gradients();
  push->set_step(4);
  push->set_samples(64);
  push->set_loss(std::nan(""));  // a diverged run is reported, not refused
  push->set_accuracy(1.0);
  EXPECT_THAT(CheckWorkerRequest(request), IsOk());

  push->set_samples(-1);
  absl::Status status = CheckWorkerRequest(request);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(),
              HasSubstr("step 4 reports -1 samples: must be >= 0"));

  push->set_samples(64);
  push->set_accuracy(87.5);  // a percentage, not a fraction
  status = CheckWorkerRequest(request);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(),
              HasSubstr("accuracy 87.5: must be a fraction in 0..1"));
}

TEST(WorkerRequestCheck, ChecksScheduleRequests) {
  proto::WorkerRequest request;
  request.set_id(2);
  request.mutable_schedule()->set_next_iteration(0);
  EXPECT_THAT(CheckWorkerRequest(request), IsOk());
  request.mutable_schedule()->set_next_iteration(48);
  EXPECT_THAT(CheckWorkerRequest(request), IsOk());
  request.mutable_schedule()->set_next_iteration(-1);
  EXPECT_THAT(CheckWorkerRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("schedule request from iteration -1 is "
                                 "negative")));
}

proto::WorkerRequest AllReduce(uint64_t offset_bytes, uint64_t elements) {
  proto::WorkerRequest request;
  request.set_id(5);
  proto::CollectiveRequest* collective = request.mutable_collective();
  collective->set_kind(proto::CollectiveRequest::KIND_ALL_REDUCE);
  collective->set_dtype(proto::DATA_TYPE_FLOAT32);
  collective->set_op(proto::REDUCE_OP_SUM);
  proto::PoolSlice* slice = collective->mutable_slice();
  slice->set_offset_bytes(offset_bytes);
  slice->set_elements(elements);
  return request;
}

TEST(WorkerRequestCheck, AcceptsSlicesThatEndAtTheLargestPoolsEnd) {
  EXPECT_THAT(CheckWorkerRequest(AllReduce(0, kMaxElements)), IsOk());
  EXPECT_THAT(CheckWorkerRequest(AllReduce(kMaxPoolBytes - 4096, 1024)),
              IsOk());
  EXPECT_THAT(CheckWorkerRequest(AllReduce(kMaxPoolBytes, 0)), IsOk());
}

// Found by tests/fuzz/worker_request_fuzzer (seed slice_past_pool_end): the
// offset and the length were each bounded, but not their sum, so a buffer
// starting inside the largest pool could end up to 4 TiB past it.
TEST(WorkerRequestCheck, RefusesSlicesThatEndPastTheLargestPool) {
  absl::Status status =
      CheckWorkerRequest(AllReduce(kMaxPoolBytes - 4096, 1025));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status.message(), HasSubstr("does not fit in any pool"));
  EXPECT_THAT(CheckWorkerRequest(AllReduce(kMaxPoolBytes, kMaxElements)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckWorkerRequest(AllReduce(1, kMaxElements)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkerRequestCheck, RefusesAHelloWithoutAPool) {
  proto::WorkerRequest request;
  request.mutable_hello()->set_worker_name("w");
  EXPECT_THAT(CheckWorkerRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(WorkerRequestCheck, RefusesARequestOfNoKind) {
  proto::WorkerRequest request;
  request.set_id(3);
  EXPECT_THAT(CheckWorkerRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace node
}  // namespace starling
