// starling-node: one machine's node daemon (DESIGN.md "The three
// processes"). See --help and node_daemon.h (which lists its threads).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "server/base/command_line.h"
#include "server/base/grpc_server.h"
#include "server/base/listen_address.h"
#include "server/base/logging.h"
#include "server/base/stop_signals.h"
#include "server/base/systemd_notify.h"
#include "server/base/version.h"
#include "server/base/worker_socket.h"
#include "server/metrics/build_info.h"
#include "server/metrics/metrics_http_server.h"
#include "server/metrics/metrics_registry.h"
#include "server/node/node_admin_service.h"
#include "server/node/node_daemon.h"
#include "server/node/node_options.h"
#include "server/node/transport_choice.h"
#include "server/transport/auth.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:29400",
          "host:port of the job's starling-coordinator");
ABSL_FLAG(std::string, job_id, "", "job to join (required)");
ABSL_FLAG(std::string, hostname, "",
          "name given to the coordinator (ranks sort by it); default: the "
          "machine's host name");
ABSL_FLAG(std::string, data_address, "127.0.0.1",
          "host the data plane (TCP transport) and admin service listen on; "
          "peers must reach it");
ABSL_FLAG(int, data_port, 29500, "data-plane TCP port");
ABSL_FLAG(int, admin_port, 29600,
          "port of the NodeAdmin gRPC service (status, shards, group); 0 "
          "turns it off");
ABSL_FLAG(std::string, worker_socket, starling::kDefaultWorkerSocket,
          "unix socket local workers connect to");
ABSL_FLAG(int, local_workers, 1,
          "workers that attach to this daemon (each collective waits for "
          "all)");
ABSL_FLAG(int, metrics_port, 29700,
          "port of the Prometheus /metrics endpoint; 0 turns it off");
ABSL_FLAG(std::string, log_level, "info",
          "lowest severity logged: debug, info, warning, error");
ABSL_FLAG(absl::Duration, worker_grace, absl::Seconds(60),
          "how long a worker that left a running run without finishing "
          "(crash, kill) holds the run for a worker with the same index to "
          "take its place; past it the run fails on every node, naming it");
ABSL_FLAG(std::string, cluster_secret_file, "",
          "file holding the cluster secret (mode 600): peers authenticate "
          "with HMAC-SHA256 before any data moves. Without one, only "
          "loopback peers are accepted (or any, with --insecure)");
ABSL_FLAG(bool, insecure, false,
          "without --cluster_secret_file, accept unauthenticated peers from "
          "any address, and serve the admin service on --data_address (a "
          "trusted network only)");
ABSL_FLAG(std::string, operator_secret_file, "",
          "file holding the operators' secret (mode 600): calls to the admin "
          "service (starlingctl inflight) must carry a credential under it "
          "or under the cluster secret. Without either secret (or TLS with "
          "client certificates) the admin service listens on 127.0.0.1 only "
          "(unless --insecure)");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate of this node: its client certificate to the "
          "coordinator and the admin service's server certificate (with "
          "--tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA certificate(s): the coordinator's certificate is verified "
          "against it, and the admin service asks its clients for a "
          "certificate it signed (mutual TLS). Set to use TLS to the "
          "coordinator");
ABSL_FLAG(double, link_gbits, 0,
          "this node's network link rate in Gbit/s, exported as "
          "starling_node_link_rate_bytes_per_second so that dashboards show "
          "bus bandwidth against it; 0: not stated");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(60),
          "bound on joining: reaching the coordinator, the group forming, "
          "connecting to the peers (a group that already runs takes the "
          "daemon in between runs: that wait lasts as long as the run)");

ABSL_FLAG(std::string, transport, "auto",
          "how writes to each peer daemon travel: auto (shared memory with "
          "the daemons of this host, the fabric with every other peer whose "
          "end has one of --fabric_provider, TCP with the rest; the log "
          "names each peer's choice and why), tcp, fabric (every peer over "
          "the fabric, or the daemon does not start, naming what is "
          "missing), shm (every peer through shared memory: a group on one "
          "host)");
ABSL_FLAG(std::vector<std::string>, fabric_provider, {},
          "libfabric providers to try, in order, comma-separated (verbs for "
          "InfiniBand/RoCE, efa, tcp for a test without RDMA); default: "
          "verbs,efa");
ABSL_FLAG(absl::Duration, loop_spin, absl::Microseconds(200),
          "how long the data plane's I/O thread polls its sockets after "
          "handling traffic before it sleeps (e.g. 200us, 0 to sleep at "
          "once): with --wait_spin, a small all-reduce runs without thread "
          "wake-ups, at the cost of CPU while traffic flows");
ABSL_FLAG(int, tcp_send_buffer_bytes, 256 * 1024,
          "SO_SNDBUF of the data plane's TCP sockets (0: the kernel's "
          "autotuning): small enough that one collective step's data does "
          "not queue far in front of the next's; raise it on links whose "
          "bandwidth-delay product is larger than about twice this");
ABSL_FLAG(absl::Duration, wait_spin, absl::Microseconds(50),
          "how long a collective step polls for a peer's data before it "
          "sleeps (e.g. 50us, 0 to never poll): a longer poll spares a "
          "thread wake-up on small all-reduces at the cost of CPU, which "
          "starling-bench reports per rank (rank core column)");
ABSL_FLAG(bool, fabric_verbs_style, false,
          "follow verbs' memory registration rules (descriptors, provider "
          "keys, pre-posted receives) on any provider, to test them on tcp");

namespace starling {
namespace node {
namespace {

constexpr char kProgram[] = "starling-node";

int Fail(int code, absl::string_view message) {
  return FailProgram(kProgram, code, message);
}

// One-line error if `port` on `host` cannot be listened on.
absl::Status CheckPort(const std::string& host, int port,
                       absl::string_view flag) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", port, " is outside 0..65535"));
  }
  if (port == 0) return absl::OkStatus();
  absl::Status status = CheckCanListen({host, port});
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "port ", port, " (", flag, ") is not usable: ", status.message()));
  }
  return absl::OkStatus();
}

// The daemon's options from the flags; InvalidArgument (exit status 2)
// naming the flag otherwise.
absl::StatusOr<NodeOptions> OptionsFromFlags() {
  NodeOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.job_id = absl::GetFlag(FLAGS_job_id);
  options.hostname = absl::GetFlag(FLAGS_hostname);
  options.data_host = absl::GetFlag(FLAGS_data_address);
  options.data_port = absl::GetFlag(FLAGS_data_port);
  options.admin_port = absl::GetFlag(FLAGS_admin_port);
  options.worker_socket = absl::GetFlag(FLAGS_worker_socket);
  options.local_workers = absl::GetFlag(FLAGS_local_workers);
  options.join_timeout = absl::GetFlag(FLAGS_timeout);
  options.worker_grace = absl::GetFlag(FLAGS_worker_grace);
  options.insecure = absl::GetFlag(FLAGS_insecure);
  options.link_gbits = absl::GetFlag(FLAGS_link_gbits);
  options.transport = absl::GetFlag(FLAGS_transport);
  options.fabric_providers = absl::GetFlag(FLAGS_fabric_provider);
  options.fabric_verbs_style = absl::GetFlag(FLAGS_fabric_verbs_style);
  // The polls: 0 (never) up to a second.
  const auto poll = [](absl::string_view flag, absl::Duration value) {
    if (value >= absl::ZeroDuration() && value <= absl::Seconds(1)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, "=", absl::FormatDuration(value),
                     " must be between 0 and 1s"));
  };
  options.wait_spin = absl::GetFlag(FLAGS_wait_spin);
  if (absl::Status s = poll("wait_spin", options.wait_spin); !s.ok()) return s;
  options.loop_spin = absl::GetFlag(FLAGS_loop_spin);
  if (absl::Status s = poll("loop_spin", options.loop_spin); !s.ok()) return s;
  options.tcp_send_buffer_bytes = absl::GetFlag(FLAGS_tcp_send_buffer_bytes);
  if (options.tcp_send_buffer_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tcp_send_buffer_bytes=", options.tcp_send_buffer_bytes,
                     " must be >= 0 (0: the kernel's autotuning)"));
  }
  absl::Status transport = CheckTransportOptions(options);
  if (!transport.ok()) return transport;
  if (!(options.link_gbits >= 0) || !std::isfinite(options.link_gbits)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--link_gbits=", options.link_gbits, " must be a rate >= 0 (Gbit/s)"));
  }
  if (options.worker_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--worker_grace must not be negative");
  }
  absl::StatusOr<std::string> secret = transport::ClusterSecretFromFlag(
      absl::GetFlag(FLAGS_cluster_secret_file));
  if (!secret.ok()) return secret.status();
  options.cluster_secret = *std::move(secret);
  absl::StatusOr<std::string> operator_secret = transport::SecretFromFlag(
      "--operator_secret_file", absl::GetFlag(FLAGS_operator_secret_file));
  if (!operator_secret.ok()) return operator_secret.status();
  options.operator_secret = *std::move(operator_secret);
  options.tls = {.cert_file = absl::GetFlag(FLAGS_tls_cert_file),
                 .key_file = absl::GetFlag(FLAGS_tls_key_file),
                 .ca_file = absl::GetFlag(FLAGS_tls_ca_file)};
  if (options.cluster_secret.empty() && options.insecure) {
    STARLING_LOG(WARNING)
        << "--insecure: peers are accepted unauthenticated from any address";
  }
  // The admin service answers whoever reaches it unless a secret or a TLS
  // CA (client certificates) guards it: then only on this machine.
  options.admin_host = options.data_host;
  if (options.tls.enabled()) {
    // Checked now, so that a wrong file is one line before anything starts.
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> checked =
        ChannelCredentialsFor(options.tls);
    if (!checked.ok()) return checked.status();
  }
  const bool admin_guarded =
      !options.cluster_secret.empty() || !options.operator_secret.empty() ||
      (!options.tls.cert_file.empty() && !options.tls.ca_file.empty());
  if (!admin_guarded && !options.insecure &&
      !IsLoopbackHost(options.data_host) && options.admin_port > 0) {
    options.admin_host = "127.0.0.1";
    STARLING_LOG(WARNING)
        << "the admin service listens on 127.0.0.1 only: without "
           "--cluster_secret_file, --operator_secret_file or --tls_ca_file "
           "anyone who reaches "
        << options.data_host
        << " could ask it (--insecure serves it there anyway)";
  }
  if (options.job_id.empty()) {
    return absl::InvalidArgumentError("--job_id is required");
  }
  if (options.data_port < 1 || options.data_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data_port=", options.data_port, " is outside 1..65535"));
  }
  if (options.local_workers < 1) {
    return absl::InvalidArgumentError("--local_workers must be >= 1");
  }
  if (options.join_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  return options;
}

// The NodeAdmin service on --admin_port (none for 0), up before the daemon
// joins, so that a port clash fails now rather than after the group formed
// with this node in it.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeAdmin(
    const NodeOptions& options, NodeAdminService* admin) {
  if (options.admin_port <= 0) return nullptr;
  // TLS where the node has a certificate of its own (mutual with a CA).
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(options.tls.cert_file.empty() ? TlsFiles()
                                                         : options.tls);
  if (!credentials.ok()) return credentials.status();
  return ServeGrpc(absl::StrCat(options.admin_host, ":", options.admin_port),
                   admin, "--admin_port", *std::move(credentials));
}

int Main(int argc, char** argv) {
  StartProgram(
      {kProgram, "server/node/main.cc", kStarlingVersion,
       absl::StrCat(
           "one machine's Starling node daemon.\n\n  ", kProgram,
           " --coordinator=HOST:PORT --job_id=NAME [--data_address=HOST] "
           "[--data_port=29500] [--admin_port=29600] "
           "[--worker_socket=PATH] [--local_workers=N] "
           "[--metrics_port=29700]\n\n"
           "Joins the coordinator, connects to its peers, holds its shard of "
           "the model, serves local workers (client API) on --worker_socket, "
           "runs the synchronous step or parameter-server mode, and serves "
           "Prometheus metrics at http://HOST:METRICS_PORT/metrics.")},
      argc, argv);
  absl::StatusOr<NodeOptions> parsed = OptionsFromFlags();
  if (!parsed.ok()) return Fail(2, parsed.status().message());
  const NodeOptions& options = *parsed;
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  // Ports are checked before anything starts, so that a taken port makes
  // exactly one line.
  for (const auto& [port, flag] : std::vector<std::pair<int, const char*>>{
           {options.data_port, "--data_port"},
           {options.admin_port, "--admin_port"},
           {metrics_port, "--metrics_port"}}) {
    absl::Status status = CheckPort(options.data_host, port, flag);
    if (!status.ok()) {
      return Fail(absl::IsInvalidArgument(status) ? 2 : 1, status.message());
    }
  }
  // A forced fabric that is not here fails now, before the daemon joins.
  {
    absl::Status fabric = ProbeForcedFabric(options);
    if (!fabric.ok()) return Fail(1, fabric.message());
  }

  const sigset_t signals = BlockStopSignals();

  metrics::MetricsRegistry registry;
  absl::Status status =
      metrics::RegisterBuildInfo(&registry, kProgram, kStarlingVersion);
  if (!status.ok()) return Fail(1, status.message());
  // /readyz: ready once the daemon has joined its group and serves workers.
  absl::Mutex ready_mu;
  std::string not_ready =
      absl::StrCat("joining job ", options.job_id, " at the coordinator ",
                   options.coordinator);
  const auto set_not_ready = [&](std::string why) {
    absl::MutexLock lock(&ready_mu);
    not_ready = std::move(why);
  };
  std::unique_ptr<metrics::MetricsHttpServer> metrics_server;
  if (metrics_port > 0) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsHttpServer>> started =
        metrics::MetricsHttpServer::Start(
            {.host = options.data_host, .port = metrics_port}, &registry,
            [&]() -> absl::Status {
              absl::MutexLock lock(&ready_mu);
              if (not_ready.empty()) return absl::OkStatus();
              return absl::UnavailableError(not_ready);
            });
    if (!started.ok()) {
      return Fail(
          1, absl::StrCat(started.status().message(), " (--metrics_port)"));
    }
    metrics_server = *std::move(started);
  }

  NodeAdminService admin(
      NodeAdminSecrets{.operator_secret = options.operator_secret,
                       .cluster_secret = options.cluster_secret});
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      ServeAdmin(options, &admin);
  if (!server.ok()) {
    return Fail(absl::IsInvalidArgument(server.status()) ? 2 : 1,
                server.status().message());
  }

  // Systemd readiness (Type=notify units): the status while joining, READY=1
  // once joined, STOPPING=1 on a signal; no-ops outside systemd. A failed
  // notification is logged only: the daemon serves either way.
  status = NotifyStatus(absl::StrCat("joining job ", options.job_id, " at ",
                                     options.coordinator));
  if (!status.ok()) STARLING_LOG(WARNING) << status.message();
  // SIGTERM/SIGINT are taken by a watcher thread from here on, so that one
  // that comes while the daemon still joins (or forms its data plane) stops
  // it at once instead of at --timeout.
  StartCanceller canceller;
  std::atomic<int> stop_signal{0};
  std::thread watcher([&] {
    stop_signal.store(WaitForStopSignal(signals));
    canceller.Cancel();
  });
  absl::StatusOr<std::unique_ptr<NodeDaemon>> daemon =
      NodeDaemon::Start(options, &registry, &canceller);
  if (!daemon.ok()) {
    if (stop_signal.load() == 0) {
      // Failed on its own: the watcher is woken with a signal of ours.
      ::pthread_kill(watcher.native_handle(), SIGTERM);
    }
    watcher.join();
    if (const int s = stop_signal.load();
        s != 0 && absl::IsCancelled(daemon.status())) {
      STARLING_LOG(WARNING)
          << "received signal " << s << " while joining job " << options.job_id
          << " at the coordinator " << options.coordinator << ": exiting";
      if (*server != nullptr) (*server)->Shutdown();
      if (metrics_server != nullptr) metrics_server->Stop();
      return 0;
    }
    return Fail(1, daemon.status().message());
  }
  admin.set_daemon(daemon->get());
  set_not_ready("");
  STARLING_LOG(INFO) << kProgram << " rank " << (*daemon)->rank()
                     << ": workers on " << options.worker_socket
                     << ", data plane " << options.data_host << ":"
                     << options.data_port;
  status = NotifyReady(
      absl::StrCat("rank ", (*daemon)->rank(), " of job ", options.job_id));
  if (!status.ok()) STARLING_LOG(WARNING) << status.message();

  watcher.join();
  const int signal_number = stop_signal.load();
  STARLING_LOG(INFO) << "received signal " << signal_number
                     << ", shutting down";
  set_not_ready("shutting down");
  status = NotifyStopping();
  if (!status.ok()) STARLING_LOG(WARNING) << status.message();
  if (*server != nullptr) {
    (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  (*daemon)->Stop();
  if (metrics_server != nullptr) metrics_server->Stop();
  return 0;
}

}  // namespace
}  // namespace node
}  // namespace starling

int main(int argc, char** argv) { return starling::node::Main(argc, argv); }
