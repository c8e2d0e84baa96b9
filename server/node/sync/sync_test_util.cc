#include "server/node/sync/sync_test_util.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/node/sync/step_data_path.h"

namespace starling {
namespace node {

std::vector<proto::TensorSpec> ThreeTensors(
    proto::DataType dtype, const std::array<int64_t, 3>& sizes) {
  std::vector<proto::TensorSpec> tensors;
  const int buckets[] = {1, 1, 0};
  for (int t = 0; t < 3; ++t) {
    proto::TensorSpec spec;
    spec.set_name(absl::StrCat("t", t));
    spec.add_shape(sizes[t]);
    spec.set_dtype(dtype);
    spec.set_bucket(buckets[t]);
    tensors.push_back(spec);
  }
  return tensors;
}

float InitialValue(uint64_t i) {
  return static_cast<float>(static_cast<int>(i % 2001) - 1000) / 64.0f;
}

absl::StatusOr<std::shared_ptr<SyncRun>> StartRunAtVersion0(
    const std::vector<proto::TensorSpec>& tensors,
    const RunFactoryOptions& options) {
  absl::StatusOr<std::shared_ptr<SyncRun>> run =
      CreateSyncRun(tensors, options);
  if (!run.ok()) return run;
  absl::Span<float> params = (*run)->store->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i] = InitialValue(i);
  StepDataPath::TakeMaster(**run);
  return run;
}

}  // namespace node
}  // namespace starling
