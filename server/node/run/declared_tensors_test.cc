#include "server/node/run/declared_tensors.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;

proto::TensorSpec Spec(const std::string& name, std::vector<int64_t> shape,
                       proto::DataType dtype = proto::DATA_TYPE_FLOAT32) {
  proto::TensorSpec spec;
  spec.set_name(name);
  for (int64_t d : shape) spec.add_shape(d);
  spec.set_dtype(dtype);
  return spec;
}

TEST(DeclaredTensors, LocalShapeMismatchNamesTensorShapesAndWorkers) {
  DeclaredTensors declared(3);
  ASSERT_TRUE(declared.Declare(0, Spec("w", {4, 5})).ok());
  const absl::Status status = declared.Declare(1, Spec("w", {4, 6}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("tensor 'w'"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("[4, 6] float32"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("[4, 5] float32"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker 1 of rank 3"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("worker 0 of rank 3"));
}

TEST(DeclaredTensors, DtypeMismatchIsRefused) {
  DeclaredTensors declared(0);
  ASSERT_TRUE(declared.Declare(0, Spec("b", {2})).ok());
  const absl::Status status =
      declared.Declare(1, Spec("b", {2}, proto::DATA_TYPE_FLOAT64));
  EXPECT_THAT(std::string(status.message()), HasSubstr("float64"));
}

TEST(DeclaredTensors, LocalTableNeedsSameOrder) {
  DeclaredTensors declared(0);
  ASSERT_TRUE(declared.Declare(0, Spec("a", {1})).ok());
  ASSERT_TRUE(declared.Declare(0, Spec("b", {2})).ok());
  ASSERT_TRUE(declared.Declare(1, Spec("b", {2})).ok());
  ASSERT_TRUE(declared.Declare(1, Spec("a", {1})).ok());
  EXPECT_FALSE(declared.LocalTable({0, 1}).ok());
  DeclaredTensors same(0);
  ASSERT_TRUE(same.Declare(0, Spec("a", {1})).ok());
  ASSERT_TRUE(same.Declare(1, Spec("a", {1})).ok());
  absl::StatusOr<std::vector<proto::TensorSpec>> table =
      same.LocalTable({0, 1});
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(table->size(), 1u);
}

TEST(TensorLayout, LaysTensorsOutInOrder) {
  const TensorLayout layout =
      TensorLayout::FromSpecs({Spec("a", {2, 3}), Spec("b", {4})});
  EXPECT_EQ(layout.total_elements, 10u);
  ASSERT_TRUE(layout.Find("b").ok());
  EXPECT_EQ((*layout.Find("b"))->offset, 6u);
  EXPECT_FALSE(layout.Find("c").ok());
}

// A tensor of 2^34 elements once aborted the daemon (std::bad_alloc, no log
// line): a model that does not fit the daemon's memory is refused at its
// declaration, naming the tensor, the need and what is available, and the
// worker's other declarations and the daemon go on.
TEST(DeclaredTensors, AModelBeyondTheDaemonsMemoryIsRefused) {
  const uint64_t gib = uint64_t{1} << 30;
  DeclaredTensors declared(2, [gib] { return 8 * gib; });
  ASSERT_OK(declared.Declare(0, Spec("w", {1 << 20})));  // 12 MiB
  const absl::Status huge = declared.Declare(0, Spec("big", {1 << 30}));
  EXPECT_THAT(huge, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(huge.message(),
            "tensor 'big' [1073741824] float32 makes worker 0's model "
            "1074790400 parameters: a run needs about 12.0 GiB of daemon rank "
            "2's memory for them (12 bytes each), more than the 8.0 GiB "
            "available");
  // What fits still does, and the refused tensor was not recorded.
  ASSERT_OK(declared.Declare(0, Spec("b", {1 << 29})));  // 6 GiB in all
  absl::StatusOr<std::vector<proto::TensorSpec>> table =
      declared.LocalTable({0});
  ASSERT_OK(table.status());
  EXPECT_EQ(table->size(), 2u);
  // On this machine (MemAvailable): 2^39 parameters fit no daemon.
  DeclaredTensors real(0);
  EXPECT_THAT(
      real.Declare(0, Spec("x", {int64_t{1} << 39})),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("tensor 'x'")));
}

}  // namespace
}  // namespace node
}  // namespace starling
