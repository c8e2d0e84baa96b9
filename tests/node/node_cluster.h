// NodeCluster: a Starling job on loopback for multi-process tests: one
// starling-coordinator, N starling-node daemons (daemon d gets hostname
// "node<d>", hence rank d) and quadratic_worker processes, each started
// with fork/exec, its stdout and stderr in files under TEST_TMPDIR. Ports
// are probed by binding, from a pid-derived start below the ephemeral
// range. The destructor SIGKILLs and reaps every
// process it started (and only those). Testonly; thread-compatible.
#ifndef STARLING_TESTS_NODE_NODE_CLUSTER_H_
#define STARLING_TESTS_NODE_NODE_CLUSTER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.pb.h"
#include "proto/node_admin.pb.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace testing_node {

struct ClusterOptions {
  int daemons = 4;
  int local_workers = 2;
  uint64_t parameter_count = 1000;
  std::string mode = "sync_sgd";
  std::string optimizer = "sgd";
  double learning_rate = 0.1;
  absl::Duration collective_timeout = absl::Seconds(10);
  absl::Duration heartbeat_timeout = absl::Seconds(2);
  // starling-node --worker_grace: how long a missing worker's slot holds
  // the run.
  absl::Duration worker_grace = absl::Seconds(60);
  // Passed as the coordinator's --parameter_count; 0 leaves it to the
  // workers' declarations (workers still get --dim=parameter_count unless
  // a test passes its own).
  bool fix_parameter_count = true;
};

struct ProcessResult {
  // Exit code; -1 when killed by a signal or still running at the bound.
  int exit_code = -1;
  bool timed_out = false;
  std::string out;
  std::string err;
};

class NodeCluster {
 public:
  explicit NodeCluster(ClusterOptions options);
  ~NodeCluster();
  NodeCluster(const NodeCluster&) = delete;
  NodeCluster& operator=(const NodeCluster&) = delete;

  void StartCoordinator();
  void StartDaemons();
  // Starts worker `index` on daemon `daemon` with `extra` flags.
  pid_t StartWorker(int daemon, int index,
                    const std::vector<std::string>& extra = {});
  // Starts every worker (daemons x local_workers) with `extra` flags.
  std::vector<pid_t> StartAllWorkers(const std::vector<std::string>& extra);

  // Waits for `pid` until `timeout`; SIGKILLs it past the bound.
  ProcessResult Wait(pid_t pid, absl::Duration timeout);
  void Kill(pid_t pid, int signal);
  // The coordinator's and daemons' stderr so far, for failure messages.
  std::string ServerLogs() const;
  // `starlingctl status` against this cluster's coordinator (2 s timeout).
  coordinator::RunResult CtlStatus() const;

  std::string coordinator_address() const;
  int data_port(int daemon) const { return data_ports_[daemon]; }
  int admin_port(int daemon) const { return admin_ports_[daemon]; }
  int metrics_port(int daemon) const { return metrics_ports_[daemon]; }
  pid_t daemon_pid(int daemon) const { return daemon_pids_[daemon]; }
  std::string socket_path(int daemon) const;
  const ClusterOptions& options() const { return options_; }

  // Control-plane queries; false (with `error`) when the RPC failed.
  bool JobStatus(proto::JobStatus* status, std::string* error);
  // The secret the status calls above and below are signed under, as an
  // operator's (for a coordinator or nodes started with a secret); empty:
  // unsigned.
  void set_operator_secret(std::string secret) {
    operator_secret_ = std::move(secret);
  }
  // The credentials of those calls' channels (TLS for a coordinator and
  // nodes started with certificates); default: in the clear.
  void set_channel_credentials(
      std::shared_ptr<grpc::ChannelCredentials> credentials) {
    channel_credentials_ = std::move(credentials);
  }
  bool NodeStatus(int daemon, proto::NodeStatusReply* status,
                  std::string* error);
  // Every running daemon of a formed group of `group_size` says its writes
  // to all its peers travel as this suite configured them: over the fabric
  // (tcp provider) with STARLING_TEST_DAEMON_FLAGS' --transport=fabric, over
  // TCP otherwise. Failures are gtest failures naming the daemon.
  void ExpectPeerTransports(int group_size);
  bool NodeGroup(int daemon, proto::GroupReply* group, std::string* error);

  // Runs a binary of this workspace (runfiles path) with `args`.
  pid_t Spawn(const std::string& name, const std::string& binary,
              const std::vector<std::string>& args);

  // The flags StartCoordinator() (or StartDaemons(), for `daemon`) passes,
  // each flag of `extra` replacing the one of the same name or appended.
  std::vector<std::string> CoordinatorFlags(
      const std::vector<std::string>& extra) const;
  // The daemon's flags also take STARLING_TEST_DAEMON_FLAGS (space-separated)
  // from the environment, below `extra`: a suite's second Bazel target runs
  // the same cases over another transport that way.
  std::vector<std::string> DaemonFlags(
      int daemon, const std::vector<std::string>& extra) const;
  // Starts a coordinator (at coordinator_address() unless `extra` says
  // otherwise) with CoordinatorFlags(extra), its output in files named
  // `name`; returns its pid. A test can start one again after killing it.
  pid_t StartCoordinatorWith(const std::string& name,
                             const std::vector<std::string>& extra);
  // Starts daemon `daemon` alone with DaemonFlags(daemon, extra);
  // daemon_pid(daemon) names it from then on.
  pid_t StartDaemon(int daemon, const std::vector<std::string>& extra);
  // What child `pid` wrote to stderr (stdout) so far.
  std::string Stderr(pid_t pid) const;
  std::string Stdout(pid_t pid) const;
  // Whether child `pid` runs (has not exited; not reaped by Wait()).
  bool Alive(pid_t pid) const;

  // Polls (every 50 ms, bounded by `bound`) the coordinator's JobStatus, or
  // daemon `daemon`'s NodeStatus, until `done` holds for it; true then.
  // `last` receives the last status read, for failure messages.
  bool WaitForJob(absl::Duration bound,
                  const std::function<bool(const proto::JobStatus&)>& done,
                  proto::JobStatus* last);
  bool WaitForNode(
      int daemon, absl::Duration bound,
      const std::function<bool(const proto::NodeStatusReply&)>& done,
      proto::NodeStatusReply* last);

 private:
  // The flags every daemon gets before the suite's and the test's.
  std::vector<std::string> DaemonBaseFlags(int daemon) const;
  // A context for an operator's `method` call, due in 5 s.
  std::unique_ptr<grpc::ClientContext> OperatorContext(
      absl::string_view method) const;
  std::string operator_secret_;
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_ =
      grpc::InsecureChannelCredentials();
  const ClusterOptions options_;
  const std::string dir_;
  std::string socket_dir_;
  int coordinator_port_ = 0;
  std::vector<int> data_ports_, admin_ports_, metrics_ports_;
  std::vector<pid_t> daemon_pids_;
  struct Child {
    pid_t pid;
    std::string out_path, err_path;
    bool reaped = false;
  };
  std::vector<Child> children_;
};

// The runfiles path of a workspace-relative binary.
std::string BinaryPath(const std::string& target);

// A loopback port nobody listens on, picked as the cluster's ports are.
int PickLoopbackPort();

// The value of the sample `name` whose labels include every one of
// `labels` (`key="value"`), from the Prometheus text at
// 127.0.0.1:`port`/metrics (2 s timeouts); NaN when absent or unreachable.
double Metric(int port, const std::string& name,
              const std::vector<std::string>& labels = {});

// $TEST_TMPDIR/name (/tmp/name outside Bazel).
std::string TempPath(const std::string& name);
// A file of raw float32 values (starling-worker --out); empty when the file
// cannot be read.
std::vector<float> ReadFloats(const std::string& path);
// The percentage after "final: test accuracy " in a starling-worker's
// output; -1 when absent.
double FinalAccuracy(const std::string& out);
// max_i |a_i - b_i|; infinity when the sizes differ.
double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b);

// Starts every worker of `cluster` with `worker_flags`, waits for each
// (at most `bound`): every one exits 0 with the same parameters, bit for
// bit (gtest expectations).
void ExpectTrainingBitIdentical(NodeCluster& cluster,
                                const std::vector<std::string>& worker_flags,
                                absl::Duration bound);

}  // namespace testing_node
}  // namespace starling

#endif  // STARLING_TESTS_NODE_NODE_CLUSTER_H_
