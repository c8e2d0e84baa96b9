// CreateBackend: maps the worker's --device name to a backend. The GPU
// backend is linked in only when the build defines STARLING_TRAIN_WITH_GPU
// (set by the gpu_backend target under --config=cuda).
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/train/backend.h"

namespace starling {
namespace train {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view name) {
  if (name == "cpu") return CreateCpuBackend();
  if (name == "gpu") {
#ifdef STARLING_TRAIN_WITH_GPU
    return CreateGpuBackend();
#else
    return absl::UnavailableError(
        "starling-worker was built without CUDA; rebuild with --config=cuda "
        "to use --device=gpu");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device \"", name, "\"; expected \"cpu\" or \"gpu\""));
}

}  // namespace train
}  // namespace starling
