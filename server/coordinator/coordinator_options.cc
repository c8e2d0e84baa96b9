#include "server/coordinator/coordinator_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace coordinator {
namespace {

struct OptimizerInfo {
  const char* name;
  int state_slots;
};

// sgd keeps nothing; momentum a velocity; adam first and second moments;
// easgd keeps the centre variable in the shard itself; "none" is plain
// all-reduce (sum only, no update).
constexpr OptimizerInfo kOptimizers[] = {
    {"none", 0}, {"sgd", 0}, {"momentum", 1}, {"adam", 2}, {"easgd", 0}};

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("coordinator option ", field, ": ", why));
}

}  // namespace

std::vector<std::string> OptimizerNames() {
  std::vector<std::string> names;
  for (const OptimizerInfo& info : kOptimizers) names.push_back(info.name);
  return names;
}

int OptimizerStateSlots(absl::string_view optimizer) {
  for (const OptimizerInfo& info : kOptimizers) {
    if (optimizer == info.name) return info.state_slots;
  }
  return 0;
}

int BytesPerElement(proto::DataType dtype) {
  switch (dtype) {
    case proto::DATA_TYPE_FLOAT32:
    case proto::DATA_TYPE_INT32:
      return 4;
    case proto::DATA_TYPE_FLOAT64:
    case proto::DATA_TYPE_INT64:
      return 8;
    case proto::DATA_TYPE_FLOAT16:
    case proto::DATA_TYPE_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

absl::Status ValidateAndComplete(CoordinatorOptions* options) {
  if (options->job_id.empty()) return Invalid("job_id", "must not be empty");
  if (options->version.empty()) return Invalid("version", "must not be empty");
  if (options->expected_nodes < 1) {
    return Invalid("expected_nodes",
                   absl::StrCat(options->expected_nodes, " is not >= 1"));
  }
  if (options->heartbeat_timeout <= absl::ZeroDuration()) {
    return Invalid(
        "heartbeat_timeout",
        absl::StrCat(absl::FormatDuration(options->heartbeat_timeout),
                     " is not positive"));
  }
  if (options->max_join_wait <= absl::ZeroDuration()) {
    return Invalid("max_join_wait", "must be positive");
  }
  if (options->mode == proto::JobConfig::MODE_UNSPECIFIED) {
    return Invalid("mode", "must be set");
  }
  if (options->iterations_per_schedule < 1) {
    return Invalid(
        "iterations_per_schedule",
        absl::StrCat(options->iterations_per_schedule, " is not >= 1"));
  }
  bool known_optimizer = false;
  for (const OptimizerInfo& info : kOptimizers) {
    known_optimizer |= options->optimizer == info.name;
  }
  if (!known_optimizer) {
    return Invalid("optimizer",
                   absl::StrCat("unknown optimizer '", options->optimizer,
                                "': expected one of ",
                                absl::StrJoin(OptimizerNames(), ", ")));
  }
  if (!(options->learning_rate >= 0)) {
    return Invalid("learning_rate",
                   absl::StrCat(options->learning_rate, " is not >= 0"));
  }
  if (options->collective_timeout <= absl::ZeroDuration()) {
    return Invalid("collective_timeout", "must be positive");
  }
  if (BytesPerElement(options->dtype) == 0) {
    return Invalid("dtype", "must be set");
  }
  uint64_t tensor_elements = 0;
  for (const proto::TensorSpec& tensor : options->tensors) {
    uint64_t elements = 1;
    for (int64_t dim : tensor.shape()) {
      if (dim < 0) {
        return Invalid("tensors",
                       absl::StrCat("tensor '", tensor.name(),
                                    "' has negative dimension ", dim));
      }
      elements *= static_cast<uint64_t>(dim);
    }
    tensor_elements += elements;
  }
  if (!options->tensors.empty()) {
    if (options->parameter_count == 0) {
      options->parameter_count = tensor_elements;
    } else if (options->parameter_count != tensor_elements) {
      return Invalid(
          "parameter_count",
          absl::StrCat(options->parameter_count,
                       " elements, but the tensors hold ", tensor_elements));
    }
  }
  if (options->partitions_per_epoch < 1) {
    return Invalid("partitions_per_epoch", "must be >= 1");
  }
  if (options->epochs < 1) return Invalid("epochs", "must be >= 1");
  return absl::OkStatus();
}

}  // namespace coordinator
}  // namespace starling
