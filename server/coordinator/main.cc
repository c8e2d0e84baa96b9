// starling-coordinator: one job's coordinator (DESIGN.md "The three
// processes"). Forms the group, detects failures, hands out schedules and
// serves /metrics. See --help.
//
// Threads: main (waits for SIGINT/SIGTERM), gRPC's pool (one thread per
// waiting Join), the failure detector (calls DetectFailures() four times
// per heartbeat interval), and the /metrics server's.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/base/clock.h"
#include "server/base/command_line.h"
#include "server/base/grpc_server.h"
#include "server/base/job_config_checks.h"
#include "server/base/listen_address.h"
#include "server/base/logging.h"
#include "server/base/stop_signals.h"
#include "server/base/systemd_notify.h"
#include "server/base/version.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_options.h"
#include "server/coordinator/coordinator_service.h"
#include "server/metrics/build_info.h"
#include "server/metrics/metrics_http_server.h"
#include "server/metrics/metrics_registry.h"
#include "server/transport/auth.h"

ABSL_FLAG(std::string, listen, "",
          "host:port of the coordinator's gRPC service; default "
          "0.0.0.0:29400 with --cluster_secret_file (or TLS with client "
          "certificates, or --insecure), else 127.0.0.1:29400. Without those "
          "an address other hosts can reach is refused");
ABSL_FLAG(std::string, job_id, "",
          "job name; every node must give the same "
          "(required)");
ABSL_FLAG(int, expected_nodes, 0,
          "nodes the group forms with; Joins wait until this many arrived "
          "(required)");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(5),
          "a node silent for longer is marked LOST");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::ZeroDuration(),
          "how often nodes heartbeat (0: a fifth of --heartbeat_timeout, at "
          "most 250ms); a killed node, reported by its peers, is found once "
          "it missed one");
ABSL_FLAG(absl::Duration, rejoin_grace, absl::ZeroDuration(),
          "how long a LOST node keeps its rank before the group re-forms "
          "without it (0: at once); a node that restarts is replaced at once");
ABSL_FLAG(int, min_nodes, 1,
          "the fewest nodes a re-formed group may have (1..expected_nodes); "
          "below it the group stays degraded until nodes join again");
ABSL_FLAG(absl::Duration, max_join_wait, absl::Minutes(10),
          "longest a Join is held waiting for the group to form");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "file holding the cluster secret (the nodes' --cluster_secret_file; "
          "mode 600): every node's call must then carry its credential "
          "under it, so that a process that does not know the secret can "
          "neither join nor speak for a member (each call signed afresh, "
          "taken once); empty: calls are taken from anyone who reaches "
          "--listen, which is then 127.0.0.1 unless --insecure");
ABSL_FLAG(std::string, operator_secret_file, "",
          "file holding the operators' secret (mode 600): status calls "
          "(starlingctl status, inflight) must carry a credential under it "
          "or under the cluster secret; empty: the cluster secret's only "
          "(or none, without one)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate of the coordinator (with --tls_key_file): the "
          "gRPC service then speaks TLS only");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA certificate(s): every caller must show a client "
          "certificate it signed (mutual TLS)");
ABSL_FLAG(bool, insecure, false,
          "without --cluster_secret_file or mutual TLS, listen where other "
          "hosts reach it anyway: anyone who reaches --listen can then join "
          "and speak for the members (a trusted network only)");
ABSL_FLAG(std::string, state_file, "",
          "where the coordinator records the group (epoch, members, key, "
          "shard map) and the runs at every change (written atomically); a "
          "coordinator started on an existing record resumes its job. One "
          "file per job; empty: no record (a restarted coordinator then "
          "learns the group from the nodes)");
ABSL_FLAG(std::string, state_etcd, "",
          "instead of --state_file: record the job in an etcd cluster (3.4 "
          "or later), at these members' client URLs, comma-separated "
          "(e.g. http://10.0.0.5:2379,http://10.0.0.6:2379), under the key "
          "--state_etcd_prefix/JOB. A coordinator started on another host "
          "with the same key resumes the job; one coordinator writes it at "
          "a time (a second one's writes are refused)");
ABSL_FLAG(std::string, state_etcd_prefix, "/starling/jobs",
          "the prefix of the job's key in etcd (--state_etcd)");
ABSL_FLAG(int, iterations_per_schedule, 16,
          "K: iterations handed out per GetSchedule call");
ABSL_FLAG(uint64_t, epochs, 1,
          "epochs to train (>= 1); each epoch reads every partition once, "
          "and GetSchedule says done after the last");
ABSL_FLAG(uint64_t, partitions_per_epoch, 1024,
          "P: data partitions per epoch (>= 1). A partition is one "
          "mini-batch of one worker: partition p of an epoch is samples "
          "[p*B, (p+1)*B) of that epoch's sample order, B the worker's batch "
          "size. Each is read once per epoch, round-robin over all workers "
          "of the job, so an epoch takes ceil(P / workers) iterations");
ABSL_FLAG(uint64_t, parameter_count, 0,
          "elements of the model's flat parameter vector (split into shards); "
          "optional: 0 takes whatever the workers declare, otherwise every "
          "run's declared tensors must add up to it");
ABSL_FLAG(std::string, mode, "sync_sgd",
          "training mode: sync_sgd, async_sgd (stale synchronous parallel, "
          "bounded by --staleness), parameter_server; the EASGD family "
          "(workers keep their own parameters, the daemons the centre "
          "variable; --elastic_*): sync_easgd (deterministic), async_easgd, "
          "async_measgd (Nesterov momentum on the local steps), "
          "hogwild_easgd (unserialised centre updates), round_robin_easgd "
          "(the original scheme: one worker at a time, in worker order)");
ABSL_FLAG(std::string, optimizer, "",
          "update applied to the shards: none (plain all-reduce), sgd, "
          "momentum, adam; easgd (the centre update of the EASGD modes). "
          "Default: easgd in the EASGD modes, sgd otherwise");
ABSL_FLAG(double, learning_rate, 0.01, "learning rate, finite and > 0");
ABSL_FLAG(int, staleness, 1,
          "--mode=async_sgd only: the staleness bound s (>= 0; stale "
          "synchronous parallel): a pull for step t includes every update of "
          "the steps before t - s. Ignored (sent as 0) in the other modes");
ABSL_FLAG(int, replicas, 1,
          "replicas of each daemon's shard besides its own: 1 keeps its "
          "master parameters and optimizer state also on a buddy daemon "
          "(another host's, where there is one), updated every step, so "
          "that a committed step survives the loss of one daemon; 0 keeps "
          "one copy (less traffic: 1/N of the model per daemon and step). "
          "In the shard owners' modes the owner sends each update to its "
          "buddy before the push returns (one more round trip per push)");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "durable checkpoints: the folder (on every node: a shared file "
          "system) where each daemon writes its master shard and optimizer "
          "state every --checkpoint_every_steps committed steps and/or "
          "--checkpoint_interval, under "
          "<job>/<incarnation>/run-<id>/ (the incarnation kept in "
          "--state_file); a run whose lost shard has no replica left goes "
          "on from the newest version written whole (a rollback, logged and "
          "told to the workers), and so does the first run after one that "
          "did not finish (a whole-cluster restart). Empty: none");
ABSL_FLAG(int, checkpoint_every_steps, 0,
          "with --checkpoint_dir: committed steps between checkpoints (>= 1; "
          "0: none)");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::ZeroDuration(),
          "with --checkpoint_dir: a checkpoint at the first committed step "
          "this long after the last one (e.g. 10m; 0: none), by whichever "
          "daemon's clock says so first: every daemon writes the same "
          "version. Combines with --checkpoint_every_steps");
ABSL_FLAG(int, elastic_tau, 4,
          "EASGD modes: tau, the local steps between a worker's elastic "
          "exchanges with the centre (>= 1)");
ABSL_FLAG(double, elastic_beta, 0.9,
          "EASGD modes: beta = alpha * workers, the moving rate alpha "
          "being beta / total workers (in (0, 1])");
ABSL_FLAG(double, elastic_momentum, 0.99,
          "--mode=async_measgd: delta, the Nesterov momentum of the "
          "workers' local steps (in [0, 1))");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Seconds(30),
          "timeout of one collective on the nodes");
ABSL_FLAG(int, metrics_port, 29401,
          "port of the Prometheus /metrics endpoint, on --listen's host; 0 "
          "turns it off");
ABSL_FLAG(std::string, log_level, "info",
          "lowest severity logged: debug, info, warning, error");

namespace starling {
namespace coordinator {
namespace {

constexpr char kProgram[] = "starling-coordinator";

// One line on stderr, then the exit code: the whole of a failed start.
int Fail(int code, absl::string_view message) {
  return FailProgram(kProgram, code, message);
}

absl::Status OptionsFromFlags(CoordinatorOptions* options) {
  options->job_id = absl::GetFlag(FLAGS_job_id);
  if (options->job_id.empty()) {
    return absl::InvalidArgumentError("--job_id is required");
  }
  options->expected_nodes = absl::GetFlag(FLAGS_expected_nodes);
  if (options->expected_nodes < 1) {
    return absl::InvalidArgumentError("--expected_nodes must be >= 1");
  }
  options->heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options->heartbeat_interval = absl::GetFlag(FLAGS_heartbeat_interval);
  options->rejoin_grace = absl::GetFlag(FLAGS_rejoin_grace);
  options->min_nodes = absl::GetFlag(FLAGS_min_nodes);
  absl::StatusOr<std::string> secret = transport::ClusterSecretFromFlag(
      absl::GetFlag(FLAGS_cluster_secret_file));
  if (!secret.ok()) return secret.status();
  options->cluster_secret = *std::move(secret);
  absl::StatusOr<std::string> operator_secret = transport::SecretFromFlag(
      "--operator_secret_file", absl::GetFlag(FLAGS_operator_secret_file));
  if (!operator_secret.ok()) return operator_secret.status();
  options->operator_secret = *std::move(operator_secret);
  options->state_file = absl::GetFlag(FLAGS_state_file);
  options->state_etcd = absl::GetFlag(FLAGS_state_etcd);
  options->state_etcd_prefix = absl::GetFlag(FLAGS_state_etcd_prefix);
  options->max_join_wait = absl::GetFlag(FLAGS_max_join_wait);
  options->iterations_per_schedule =
      absl::GetFlag(FLAGS_iterations_per_schedule);
  options->epochs = absl::GetFlag(FLAGS_epochs);
  options->partitions_per_epoch = absl::GetFlag(FLAGS_partitions_per_epoch);
  options->parameter_count = absl::GetFlag(FLAGS_parameter_count);
  options->optimizer = absl::GetFlag(FLAGS_optimizer);
  options->learning_rate = absl::GetFlag(FLAGS_learning_rate);
  options->collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  options->staleness = absl::GetFlag(FLAGS_staleness);
  options->replicas = absl::GetFlag(FLAGS_replicas);
  options->checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options->checkpoint_every_steps = absl::GetFlag(FLAGS_checkpoint_every_steps);
  options->checkpoint_interval = absl::GetFlag(FLAGS_checkpoint_interval);
  options->elastic_tau = absl::GetFlag(FLAGS_elastic_tau);
  options->elastic_beta = absl::GetFlag(FLAGS_elastic_beta);
  options->elastic_momentum = absl::GetFlag(FLAGS_elastic_momentum);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const proto::ModeInfo* info = proto::FindMode(mode);
  if (info == nullptr) {
    std::vector<std::string> names;
    for (const proto::ModeInfo& m : proto::KnownModes()) {
      names.push_back(m.name);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode=", mode, " is not one of ", absl::StrJoin(names, ", ")));
  }
  options->mode = info->mode;
  // Unimplemented modes and optimizers, and a bad learning rate, are
  // refused here with the daemons' own rules (proto/job_config_checks.h).
  return ValidateAndComplete(options);
}

// Calls DetectFailures() four times per heartbeat interval (a member
// reported vanished is LOST 1.25 intervals after its last heartbeat) until
// `stop`.
// Also keeps the unit's STATUS= line (systemctl status) to the group as it
// stands, sent when it changes.
void RunFailureDetector(Coordinator* coordinator, absl::Duration interval,
                        absl::Notification* stop) {
  const absl::Duration period = std::max(interval / 4, absl::Milliseconds(20));
  std::string said;
  while (!stop->WaitForNotificationWithTimeout(period)) {
    coordinator->DetectFailures();
    absl::StatusOr<proto::JobStatus> job = coordinator->GetJobStatus({});
    if (!job.ok()) continue;
    const std::string line =
        job->formed()
            ? absl::StrCat("job ", job->job_id(), ": group epoch ",
                           job->group_epoch(), ", ", job->healthy_nodes(),
                           " of ", job->group_size(), " nodes healthy (",
                           job->expected_nodes(), " expected)")
            : absl::StrCat("job ", job->job_id(), ": waiting for ",
                           job->expected_nodes(), " nodes (", job->nodes_size(),
                           " joined)");
    if (line == said) continue;
    said = line;
    absl::Status notified = NotifyStatus(line);
    if (!notified.ok()) STARLING_LOG(DEBUG) << notified.message();
  }
}

// Bind problems are found before anything starts, so they make exactly one
// line: 0 when --listen and --metrics_port can be bound, else the exit
// status (2: a bad flag, 1: a taken port) after the message.
int CheckPorts(const HostPort& listen, int metrics_port) {
  absl::Status status = CheckCanListen(listen);
  if (!status.ok()) {
    return Fail(1, absl::StrCat(status.message(), " (--listen)"));
  }
  if (metrics_port < 0 || metrics_port > 65535) {
    return Fail(2, absl::StrCat("--metrics_port=", metrics_port,
                                " is outside 0..65535"));
  }
  if (metrics_port > 0) {
    status = CheckCanListen({listen.host, metrics_port});
    if (!status.ok()) {
      return Fail(1, absl::StrCat(status.message(), " (--metrics_port)"));
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  StartProgram(
      {kProgram, "server/coordinator/main.cc", kStarlingVersion,
       absl::StrCat(
           "the coordinator of one Starling training job.\n\n"
           "  ",
           kProgram,
           " --job_id=NAME --expected_nodes=N [--listen=HOST:29400] "
           "[--cluster_secret_file=PATH] "
           "[--metrics_port=29401] ...\n\n"
           "Forms the group once N node daemons joined (ranks by hostname, "
           "then address), marks nodes LOST after --heartbeat_timeout without "
           "a heartbeat and re-forms the group without them (a new group "
           "epoch, ranks re-numbered) after --rejoin_grace; a node that "
           "joins later (a restarted daemon) is taken in at once where the run "
           "can go on with it (--replicas or checkpoints; it gets its shard "
           "from the others), else between runs. It "
           "hands out K iterations per schedule request, and "
           "serves Prometheus metrics at http://HOST:METRICS_PORT/metrics. "
           "Runs follow one another on the same daemons: each begins when "
           "every node's workers ended their declarations (BeginRun) and "
           "ends when they all finished, or a step failed (EndRun). A "
           "restarted coordinator adopts the running group as its nodes "
           "re-register.")},
      argc, argv);

  CoordinatorOptions options;
  absl::Status status = OptionsFromFlags(&options);
  if (!status.ok()) return Fail(2, status.message());

  const TlsFiles tls{.cert_file = absl::GetFlag(FLAGS_tls_cert_file),
                     .key_file = absl::GetFlag(FLAGS_tls_key_file),
                     .ca_file = absl::GetFlag(FLAGS_tls_ca_file)};
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(tls);
  if (!credentials.ok()) return Fail(2, credentials.status().message());
  // Who may call: members proving the cluster secret, or holding a client
  // certificate of the CA. Without either, only this machine (or anyone,
  // with --insecure).
  options.certified_identities = !tls.cert_file.empty() && !tls.ca_file.empty();
  const bool guarded =
      !options.cluster_secret.empty() || options.certified_identities;
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  std::string address = absl::GetFlag(FLAGS_listen);
  if (address.empty()) {
    address = guarded || insecure ? "0.0.0.0:29400" : "127.0.0.1:29400";
  }
  absl::StatusOr<HostPort> listen = ParseHostPort(address);
  if (!listen.ok())
    return Fail(2, absl::StrCat("--listen: ", listen.status().message()));
  if (!guarded && !IsLoopbackHost(listen->host)) {
    if (!insecure) {
      return Fail(
          2, absl::StrCat("--listen=", address,
                          " can be reached from other hosts, and without "
                          "--cluster_secret_file (or TLS with client "
                          "certificates: --tls_cert_file, --tls_key_file, "
                          "--tls_ca_file) anyone who reaches it could join "
                          "the job and speak for its members; give a secret, "
                          "listen on 127.0.0.1, or pass --insecure on a "
                          "trusted network"));
    }
    STARLING_LOG(WARNING) << "--insecure: the coordinator takes calls from "
                             "anyone who reaches "
                          << address;
  }
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (const int code = CheckPorts(*listen, metrics_port); code != 0) {
    return code;
  }

  // Before any thread starts, so that every thread inherits the mask.
  const sigset_t signals = BlockStopSignals();

  RealClock clock;
  metrics::MetricsRegistry registry;
  status = metrics::RegisterBuildInfo(&registry, kProgram, kStarlingVersion);
  if (!status.ok()) return Fail(1, status.message());
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(options, &clock, &registry);
  if (!coordinator.ok()) return Fail(2, coordinator.status().message());

  // /readyz: ready once the gRPC service accepts joins.
  std::atomic<bool> serving{false};
  std::unique_ptr<metrics::MetricsHttpServer> metrics_server;
  if (metrics_port > 0) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> started =
        metrics::MetricsHttpServer::Start(
            {.host = listen->host, .port = metrics_port}, &registry,
            [&serving]() -> absl::Status {
              if (serving.load()) return absl::OkStatus();
              return absl::UnavailableError("the gRPC service is not serving");
            });
    if (!started.ok()) {
      return Fail(
          1, absl::StrCat(started.status().message(), " (--metrics_port)"));
    }
    metrics_server = *std::move(started);
  }

  CoordinatorService service(coordinator->get());
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      ServeGrpc(address, &service, "--listen", *credentials);
  if (!server.ok()) return Fail(1, server.status().message());
  serving.store(true);

  STARLING_LOG(INFO) << kProgram << " " << kStarlingVersion << ": job '"
                     << options.job_id << "' on " << address << ", waiting for "
                     << options.expected_nodes << " nodes; heartbeat timeout "
                     << absl::FormatDuration(options.heartbeat_timeout) << ", "
                     << options.iterations_per_schedule
                     << " iterations per schedule, " << options.epochs
                     << " epoch(s)";
  if (options.cluster_secret.empty()) {
    STARLING_LOG(WARNING)
        << "no --cluster_secret_file: any process that reaches " << address
        << (tls.ca_file.empty() ? "" : " with a certificate of the CA")
        << " can join the job and speak for its members";
  } else {
    STARLING_LOG(INFO) << "nodes' calls must carry a fresh credential under "
                          "the cluster secret";
  }
  if (tls.enabled()) {
    STARLING_LOG(INFO) << "TLS on " << address
                       << (tls.ca_file.empty()
                               ? ""
                               : ", every caller with a client certificate "
                                 "of --tls_ca_file");
  }
  if (metrics_server != nullptr) {
    STARLING_LOG(INFO) << "metrics at http://" << metrics_server->address()
                       << "/metrics";
  }

  // Systemd readiness (Type=notify units); a no-op outside systemd, and a
  // failed notification is logged only.
  status = NotifyReady(absl::StrCat("job ", options.job_id, " on ", address,
                                    ", waiting for ", options.expected_nodes,
                                    " nodes"));
  if (!status.ok()) STARLING_LOG(WARNING) << status.message();

  absl::Notification stop_detector;
  std::thread detector(RunFailureDetector, coordinator->get(),
                       HeartbeatInterval(options), &stop_detector);

  const int signal_number = WaitForStopSignal(signals);
  STARLING_LOG(INFO) << "received signal " << signal_number
                     << ", shutting down";
  serving.store(false);
  status = NotifyStopping();
  if (!status.ok()) STARLING_LOG(WARNING) << status.message();
  (*coordinator)->Shutdown();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  stop_detector.Notify();
  detector.join();
  if (metrics_server != nullptr) metrics_server->Stop();
  STARLING_LOG(INFO) << "stopped";
  return 0;
}

}  // namespace
}  // namespace coordinator
}  // namespace starling

int main(int argc, char** argv) {
  return starling::coordinator::Main(argc, argv);
}
