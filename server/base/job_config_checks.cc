#include "server/base/job_config_checks.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/base/optimizer_names.h"

namespace starling {
namespace proto {
namespace {

constexpr ModeInfo kModes[] = {
    {"sync_sgd", JobConfig::MODE_SYNC_SGD, true},
    {"async_sgd", JobConfig::MODE_ASYNC_SGD, true},
    {"parameter_server", JobConfig::MODE_PARAMETER_SERVER, true},
    {"sync_easgd", JobConfig::MODE_SYNC_EASGD, true},
    {"async_easgd", JobConfig::MODE_ASYNC_EASGD, true},
    {"async_measgd", JobConfig::MODE_ASYNC_MEASGD, true},
    {"hogwild_easgd", JobConfig::MODE_HOGWILD_EASGD, true},
    {"round_robin_easgd", JobConfig::MODE_ROUND_ROBIN_EASGD, true},
};

std::vector<std::string> ElasticModeNames() {
  std::vector<std::string> names;
  for (const ModeInfo& info : kModes) {
    if (IsElasticMode(info.mode)) names.push_back(info.name);
  }
  return names;
}

std::vector<std::string> AllModeNames() {
  std::vector<std::string> names;
  for (const ModeInfo& info : kModes) names.push_back(info.name);
  return names;
}

std::vector<std::string> NonElasticOptimizers() {
  std::vector<std::string> names;
  for (const std::string& name :
       OptimizerNames(OptimizerFilter::kImplemented)) {
    if (name != "easgd") names.push_back(name);
  }
  return names;
}

}  // namespace

absl::Span<const ModeInfo> KnownModes() { return kModes; }

bool IsElasticMode(JobConfig::Mode mode) {
  switch (mode) {
    case JobConfig::MODE_SYNC_EASGD:
    case JobConfig::MODE_ASYNC_EASGD:
    case JobConfig::MODE_ASYNC_MEASGD:
    case JobConfig::MODE_HOGWILD_EASGD:
    case JobConfig::MODE_ROUND_ROBIN_EASGD:
      return true;
    default:
      return false;
  }
}

bool UsesShardOwners(JobConfig::Mode mode) {
  return mode == JobConfig::MODE_PARAMETER_SERVER ||
         (IsElasticMode(mode) && mode != JobConfig::MODE_SYNC_EASGD);
}

bool WritesCheckpoints(const JobConfig& config) {
  return !config.checkpoint_dir().empty() &&
         (config.checkpoint_every_steps() > 0 ||
          config.checkpoint_interval_ms() > 0);
}

const char* DefaultOptimizer(JobConfig::Mode mode) {
  return IsElasticMode(mode) ? "easgd" : "sgd";
}

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
  const bool elastic = IsElasticMode(config.mode());
  if (elastic && optimizer->name != std::string("easgd")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer=", optimizer->name, ": --mode=", mode->name,
        " keeps the centre variable on the daemons, updated by "
        "--optimizer=easgd (the default for the EASGD modes); the workers' "
        "local steps use --learning_rate"));
  }
  if (!elastic && optimizer->name == std::string("easgd")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--optimizer=easgd is the centre update of the EASGD modes (",
        absl::StrJoin(ElasticModeNames(), ", "), "); --mode=", mode->name,
        " takes one of ", absl::StrJoin(NonElasticOptimizers(), ", ")));
  }
  if (!std::isfinite(config.learning_rate()) || config.learning_rate() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--learning_rate=", config.learning_rate(),
                     ": the learning rate must be finite and > 0"));
  }
  if (!elastic) return absl::OkStatus();
  if (config.elastic_tau() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic_tau=", config.elastic_tau(),
                     ": the steps between elastic exchanges must be >= 1"));
  }
  if (!(config.elastic_beta() > 0 && config.elastic_beta() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--elastic_beta=", config.elastic_beta(),
        ": beta (alpha times the number of workers) must be in (0, 1]"));
  }
  if (!(config.elastic_momentum() >= 0 && config.elastic_momentum() < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic_momentum=", config.elastic_momentum(),
                     ": the momentum must be in [0, 1)"));
  }
  return absl::OkStatus();
}

}  // namespace proto
}  // namespace starling
