#include "proto/job_config_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/optimizer_names.h"

namespace starling {
namespace proto {
namespace {

// async_sgd runs as sync_sgd for now (the daemons treat every mode but
// parameter_server as the synchronous step); the EASGD family has kernels
// (server/shard/optimizer/easgd.h) but no daemon engine yet.
constexpr ModeInfo kModes[] = {
    {"sync_sgd", JobConfig::MODE_SYNC_SGD, true},
    {"async_sgd", JobConfig::MODE_ASYNC_SGD, true},
    {"parameter_server", JobConfig::MODE_PARAMETER_SERVER, true},
    {"sync_easgd", JobConfig::MODE_SYNC_EASGD, false},
    {"async_easgd", JobConfig::MODE_ASYNC_EASGD, false},
    {"async_measgd", JobConfig::MODE_ASYNC_MEASGD, false},
    {"hogwild_easgd", JobConfig::MODE_HOGWILD_EASGD, false},
};

std::vector<std::string> AllModeNames() {
  std::vector<std::string> names;
  for (const ModeInfo& info : kModes) names.push_back(info.name);
  return names;
}

}  // namespace

absl::Span<const ModeInfo> KnownModes() { return kModes; }

const ModeInfo* FindMode(absl::string_view name) {
  for (const ModeInfo& info : kModes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

const ModeInfo* FindMode(JobConfig::Mode mode) {
  for (const ModeInfo& info : kModes) {
    if (mode == info.mode) return &info;
  }
  return nullptr;
}

std::vector<std::string> ImplementedModeNames() {
  std::vector<std::string> names;
  for (const ModeInfo& info : kModes) {
    if (info.implemented) names.push_back(info.name);
  }
  return names;
}

absl::Status CheckJobConfig(const JobConfig& config) {
  const ModeInfo* mode = FindMode(config.mode());
  if (mode == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode: mode ", static_cast<int>(config.mode()),
                     " is not one of ", absl::StrJoin(AllModeNames(), ", ")));
  }
  if (!mode->implemented) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode=", mode->name, " is not implemented yet; implemented modes: ",
        absl::StrJoin(ImplementedModeNames(), ", ")));
  }
  const OptimizerInfo* optimizer = FindOptimizer(config.optimizer());
  if (optimizer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer=", config.optimizer(), ": unknown optimizer '",
        config.optimizer(), "': expected one of ",
        absl::StrJoin(OptimizerNames(OptimizerFilter::kImplemented), ", ")));
  }
  if (!optimizer->implemented) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer=", optimizer->name,
        " is not implemented yet; implemented optimizers: ",
        absl::StrJoin(OptimizerNames(OptimizerFilter::kImplemented), ", ")));
  }
  if (!std::isfinite(config.learning_rate()) || config.learning_rate() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--learning_rate=", config.learning_rate(),
                     ": the learning rate must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace proto
}  // namespace starling
