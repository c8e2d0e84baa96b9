#include "tests/node/reference_mlp.h"

#include <algorithm>
#include <utility>

#include "gtest/gtest.h"

namespace starling {
namespace testing_node {

std::unique_ptr<ReferenceMlp> MakeReferenceMlp(int64_t train_limit, int batch) {
  absl::StatusOr<train::Dataset> data = train::LoadFashionMnist(
      train::kDefaultFashionMnistDir, "train", train_limit);
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<train::Backend>> backend =
      train::CreateBackend("cpu");
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<train::Model>> model = train::Model::Create(
      train::ModelKind::kMlp, backend->get(), std::max(batch, 256));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  auto reference = std::make_unique<ReferenceMlp>();
  reference->data = *std::move(data);
  reference->backend = *std::move(backend);
  reference->model = *std::move(model);
  return reference;
}

}  // namespace testing_node
}  // namespace starling
