// CoordinatorOptions: everything that configures one job's coordinator.
// main.cc fills it from flags; tests fill it directly. Plain data.
#ifndef STARLING_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_
#define STARLING_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/common.pb.h"
#include "proto/coordinator.pb.h"
#include "server/base/version.h"

namespace starling {
namespace coordinator {

struct CoordinatorOptions {
  // Required. Every request must name this job.
  std::string job_id;
  // The version nodes must run (default: this build's).
  std::string version = kStarlingVersion;
  // Required, >= 1: the group forms when this many nodes have joined.
  int expected_nodes = 0;
  // A member silent for longer than this is marked LOST.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // How often members heartbeat (JobConfig.heartbeat_interval_ms); zero: a
  // fifth of heartbeat_timeout, at most 250 ms. A member whose peers saw it
  // vanish is LOST once it missed a slot (SuspectSilence), so this bounds
  // how fast a killed daemon is found. At most half the timeout.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // How long a LOST member keeps its rank, waiting for it to come back,
  // before the group re-forms without it (zero: at once). A member that
  // restarts (joins afresh) is replaced at once whatever the grace.
  absl::Duration rejoin_grace = absl::ZeroDuration();
  // The fewest members a re-formed group may have (1 <= min_nodes <=
  // expected_nodes): below it the group stays degraded, its runs refused,
  // until enough nodes join again.
  int min_nodes = 1;
  // Longest a Join is held waiting for the group, whatever its deadline.
  absl::Duration max_join_wait = absl::Minutes(10);
  // Where the coordinator records its job (state_file.h): the group, its
  // epoch and key, the shard map and the runs. A coordinator started on an
  // existing record resumes it. Empty: nowhere (a restarted coordinator
  // then learns the group from its members' re-registrations).
  std::string state_file;
  // Or under a key of an etcd cluster (etcd_store.h): its members' client
  // URLs, comma-separated ("http://10.0.0.5:2379,..."), and the key's
  // prefix (the key is PREFIX/JOB_ID). At most one of state_file and
  // state_etcd.
  std::string state_etcd;
  std::string state_etcd_prefix = "/starling/jobs";
  // The cluster secret (--cluster_secret_file, the nodes' file): when set,
  // every node's call must carry its credential under it (Coordinator::
  // CheckCaller); empty: calls are taken from anyone who reaches the port.
  std::string cluster_secret;
  // The operator secret (--operator_secret_file): operators' calls
  // (GetJobStatus: starlingctl status, inflight) carry a credential under
  // it or under the cluster secret; without either secret they are open.
  std::string operator_secret;
  // Mutual TLS (main.cc, with --tls_ca_file): a member's calls are taken
  // only for the hostname its client certificate names (common name or
  // subjectAltName), so that a node speaks only for its own certificate.
  bool certified_identities = false;
  // Set by Coordinator::Create: the record's place in messages
  // (StateStore::where).
  std::string state_where;

  // --- Sent to every node in JoinResponse.config. ---
  proto::JobConfig::Mode mode = proto::JobConfig::MODE_SYNC_SGD;
  // K: iterations per GetSchedule answer, >= 1.
  int iterations_per_schedule = 16;
  // Mode, optimizer and learning rate are checked by
  // proto::CheckJobConfig, the rules the daemons enforce: an implemented
  // mode, an implemented optimizer (server/base/optimizer_names.h), a
  // finite learning rate > 0.
  // Empty: proto::DefaultOptimizer(mode) (easgd for the EASGD modes, sgd
  // otherwise).
  std::string optimizer = "sgd";
  double learning_rate = 0.01;
  absl::Duration collective_timeout = absl::Seconds(30);
  // Elements of the flat parameter vector. 0 (the default) = whatever the
  // workers declare: every run takes the sum of its agreed tensor table.
  // Non-zero: every run's table must add up to it (BeginRun refuses
  // others). With `tensors` given, 0 becomes their sum, and a non-zero
  // value must equal it.
  uint64_t parameter_count = 0;
  std::vector<proto::TensorSpec> tensors;
  // Element type of the parameters.
  proto::DataType dtype = proto::DATA_TYPE_FLOAT32;
  // Data partitions per epoch (>= 1) and epochs to train (>= 1).
  uint64_t partitions_per_epoch = 1024;
  uint64_t epochs = 1;
  // MODE_ASYNC_SGD: the staleness bound s (>= 0; JobConfig.staleness). Sent
  // as 0 in the other modes, where it means nothing.
  int staleness = 1;
  // JobConfig.replicas: 1 keeps a buddy replica of every shard, 0 none.
  int replicas = 1;
  // JobConfig.checkpoint_*: the folder every daemon writes its durable
  // checkpoints to, the committed steps between them (0: none), and the
  // wall-clock time between them (zero: none); either or both.
  std::string checkpoint_dir;
  int checkpoint_every_steps = 0;
  absl::Duration checkpoint_interval = absl::ZeroDuration();
  // The job's checkpoint history (CoordinatorState.checkpoint_incarnation):
  // set by Coordinator::Create from the state file, or new.
  std::string checkpoint_incarnation;
  // The EASGD modes (JobConfig.elastic_*; sent as 0 in the others): steps
  // between exchanges (>= 1), beta = alpha * workers (in (0, 1]) and
  // async_measgd's Nesterov momentum (in [0, 1)). Defaults: beta and
  // momentum of Zhang, Choromanska & LeCun's published code.
  int elastic_tau = 4;
  double elastic_beta = 0.9;
  double elastic_momentum = 0.99;
};

// Checks `options` and fills derived fields (parameter_count from tensors).
// InvalidArgument naming the bad field (or, for the rules the daemons
// enforce, the flag and its value) otherwise.
absl::Status ValidateAndComplete(CoordinatorOptions* options);

// How often nodes heartbeat: options.heartbeat_interval, or a fifth of the
// heartbeat timeout, at most 250 ms.
absl::Duration HeartbeatInterval(const CoordinatorOptions& options);
// How long a member whose peers report it vanished from their data plane
// may go without a heartbeat before it is LOST: 1.25 heartbeat intervals
// (it missed its slot), instead of the whole heartbeat timeout.
absl::Duration SuspectSilence(const CoordinatorOptions& options);

// The JobConfig sent to every node in JoinResponse.config.
// REQUIRES: ValidateAndComplete(&options) succeeded.
proto::JobConfig JobConfigFor(const CoordinatorOptions& options);

// Bytes per element of `dtype`; 0 for DATA_TYPE_UNSPECIFIED.
int BytesPerElement(proto::DataType dtype);

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_COORDINATOR_OPTIONS_H_
