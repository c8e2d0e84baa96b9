#include "server/coordinator/coordinator_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/base/data_type.h"
#include "server/base/job_config_checks.h"
#include "server/base/proto_data_type.h"
#include "server/base/status_macros.h"
#include "server/base/tensor_table.h"

namespace starling {
namespace coordinator {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("coordinator option ", field, ": ", why));
}

}  // namespace

int BytesPerElement(proto::DataType dtype) {
  absl::StatusOr<DataType> known = proto::DataTypeFromProto(dtype);
  return known.ok() ? static_cast<int>(DataTypeBytes(*known)) : 0;
}

absl::Duration HeartbeatInterval(const CoordinatorOptions& options) {
  if (options.heartbeat_interval > absl::ZeroDuration()) {
    return options.heartbeat_interval;
  }
  // At least five heartbeats per timeout (one or two lost ones do not make
  // a node look dead), and four a second: a killed daemon, once its peers
  // report it, is found within a slot.
  return std::max(absl::Milliseconds(1), std::min(options.heartbeat_timeout / 5,
                                                  absl::Milliseconds(250)));
}

absl::Duration SuspectSilence(const CoordinatorOptions& options) {
  return HeartbeatInterval(options) * 5 / 4;
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
  if (options->heartbeat_interval < absl::ZeroDuration() ||
      options->heartbeat_interval * 2 > options->heartbeat_timeout) {
    return Invalid(
        "heartbeat_interval",
        absl::StrCat(absl::FormatDuration(options->heartbeat_interval),
                     " is not in 0 (automatic) .. half the heartbeat timeout ",
                     absl::FormatDuration(options->heartbeat_timeout)));
  }
  if (options->rejoin_grace < absl::ZeroDuration()) {
    return Invalid("rejoin_grace",
                   absl::StrCat(absl::FormatDuration(options->rejoin_grace),
                                " is negative"));
  }
  if (options->min_nodes < 1 || options->min_nodes > options->expected_nodes) {
    return Invalid("min_nodes",
                   absl::StrCat(options->min_nodes, " is not in 1..",
                                options->expected_nodes, " (expected_nodes)"));
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
  if (options->optimizer.empty()) {
    options->optimizer = proto::DefaultOptimizer(options->mode);
  }
  proto::JobConfig rules;
  rules.set_mode(options->mode);
  rules.set_optimizer(options->optimizer);
  rules.set_learning_rate(options->learning_rate);
  rules.set_elastic_tau(options->elastic_tau);
  rules.set_elastic_beta(options->elastic_beta);
  rules.set_elastic_momentum(options->elastic_momentum);
  STARLING_RETURN_IF_ERROR(proto::CheckJobConfig(rules));
  if (options->collective_timeout <= absl::ZeroDuration()) {
    return Invalid("collective_timeout", "must be positive");
  }
  if (BytesPerElement(options->dtype) == 0) {
    return Invalid("dtype", "must be set");
  }
  if (!options->tensors.empty()) {
    const absl::Status tensors_ok = proto::CheckTensorSpecs(options->tensors);
    if (!tensors_ok.ok()) return Invalid("tensors", tensors_ok.message());
    const uint64_t tensor_elements = proto::TotalElements(options->tensors);
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
  if (options->staleness < 0) {
    // Named as the flag: it is the only way to set it outside tests.
    return absl::InvalidArgumentError(
        absl::StrCat("--staleness=", options->staleness,
                     ": the staleness bound must be >= 0"));
  }
  if (options->replicas < 0 || options->replicas > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--replicas=", options->replicas,
        ": 0 (one copy of each shard) or 1 (a buddy replica besides)"));
  }
  if (!options->state_file.empty() && !options->state_etcd.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state_file=", options->state_file,
        " and --state_etcd=", options->state_etcd,
        ": the coordinator records its job in one place; give one of them"));
  }
  if (!options->state_etcd.empty() &&
      (options->state_etcd_prefix.empty() ||
       options->state_etcd_prefix.front() != '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state_etcd_prefix='", options->state_etcd_prefix,
        "': must begin with '/' (the record's key is PREFIX/JOB_ID)"));
  }
  if (options->checkpoint_every_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every_steps=", options->checkpoint_every_steps,
        ": must be >= 0"));
  }
  if (options->checkpoint_every_steps > 0 && options->checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_every_steps=", options->checkpoint_every_steps,
        " needs --checkpoint_dir (the folder the daemons write them to)"));
  }
  if (options->checkpoint_interval < absl::ZeroDuration() ||
      (options->checkpoint_interval > absl::ZeroDuration() &&
       options->checkpoint_interval < absl::Milliseconds(1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_interval=",
                     absl::FormatDuration(options->checkpoint_interval),
                     ": must be 0 (none) or at least 1ms"));
  }
  if (options->checkpoint_interval > absl::ZeroDuration() &&
      options->checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_interval=",
        absl::FormatDuration(options->checkpoint_interval),
        " needs --checkpoint_dir (the folder the daemons write them to)"));
  }
  if (!options->checkpoint_dir.empty() &&
      options->checkpoint_dir.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint_dir=", options->checkpoint_dir,
        ": must be an absolute path (the daemons resolve it, each in its "
        "own working folder)"));
  }
  return absl::OkStatus();
}

proto::JobConfig JobConfigFor(const CoordinatorOptions& options) {
  proto::JobConfig config;
  config.set_mode(options.mode);
  config.set_iterations_per_schedule(options.iterations_per_schedule);
  config.set_optimizer(options.optimizer);
  config.set_learning_rate(options.learning_rate);
  config.set_collective_timeout_ms(
      absl::ToInt64Milliseconds(options.collective_timeout));
  for (const proto::TensorSpec& tensor : options.tensors) {
    *config.add_tensors() = tensor;
  }
  config.set_parameter_count(options.parameter_count);
  config.set_dtype(options.dtype);
  config.set_partitions_per_epoch(options.partitions_per_epoch);
  config.set_epochs(options.epochs);
  config.set_staleness(
      options.mode == proto::JobConfig::MODE_ASYNC_SGD ? options.staleness : 0);
  config.set_replicas(options.replicas);
  if (options.checkpoint_every_steps > 0 ||
      options.checkpoint_interval > absl::ZeroDuration()) {
    config.set_checkpoint_dir(
        absl::StrCat(options.checkpoint_dir, "/", options.job_id,
                     options.checkpoint_incarnation.empty()
                         ? std::string()
                         : absl::StrCat("/", options.checkpoint_incarnation)));
    config.set_checkpoint_every_steps(options.checkpoint_every_steps);
    config.set_checkpoint_interval_ms(
        absl::ToInt64Milliseconds(options.checkpoint_interval));
  }
  if (proto::IsElasticMode(options.mode)) {
    config.set_elastic_tau(options.elastic_tau);
    config.set_elastic_beta(options.elastic_beta);
    config.set_elastic_momentum(options.elastic_momentum);
  }
  config.set_heartbeat_interval_ms(std::max<int64_t>(
      1, absl::ToInt64Milliseconds(HeartbeatInterval(options))));
  config.set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(options.heartbeat_timeout));
  config.set_rejoin_grace_ms(absl::ToInt64Milliseconds(options.rejoin_grace));
  return config;
}

}  // namespace coordinator
}  // namespace starling
