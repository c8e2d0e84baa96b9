#include "tests/node/node_cluster.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/base/grpc_server.h"
#include "server/base/logging.h"
#include "server/coordinator/test_binaries.h"
#include "tests/node/test_params.h"

namespace starling {
namespace testing_node {
namespace {

std::string MakeDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string base = tmp != nullptr ? tmp : "/tmp";
  std::string dir = absl::StrCat(base, "/cluster_", ::getpid(), "_",
                                 absl::ToUnixMicros(absl::Now()) % 1000000);
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A loopback port below the kernel's ephemeral range (32768 and up on
// Linux by default), so that no outgoing connection of the job itself can
// take it between this probe and the daemon's bind, as can happen with
// bind-to-0 ports. Candidates start at a pid-derived offset (parallel tests
// start apart) and each is probed with a bind.
int PickPort() {
  static int next = 0;  // test-process global: tests run one at a time
  for (int attempt = 0; attempt < 2000; ++attempt) {
    const int port =
        20000 + static_cast<int>((::getpid() * 131 + 7 * next++) % 12000);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    STARLING_CHECK(fd >= 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free =
        ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    if (free) return port;
  }
  STARLING_CHECK(false) << "no free loopback port in 20000..31999";
  return 0;
}

}  // namespace

std::string BinaryPath(const std::string& target) {
  return coordinator::RunfilePath(target);
}

NodeCluster::NodeCluster(ClusterOptions options)
    : options_(std::move(options)), dir_(MakeDir()) {
  // Unix socket paths are limited to 107 bytes; TEST_TMPDIR is longer.
  char socket_dir[] = "/tmp/starling-node-test-XXXXXX";
  STARLING_CHECK(::mkdtemp(socket_dir) != nullptr);
  socket_dir_ = socket_dir;
  coordinator_port_ = PickPort();
  for (int d = 0; d < options_.daemons; ++d) {
    data_ports_.push_back(PickPort());
    admin_ports_.push_back(PickPort());
    metrics_ports_.push_back(PickPort());
  }
}

NodeCluster::~NodeCluster() {
  for (Child& child : children_) {
    if (child.reaped) continue;
    ::kill(child.pid, SIGKILL);
    ::waitpid(child.pid, nullptr, 0);
  }
  // Sockets and their lock files, also those of daemons killed by -9.
  std::error_code ignored;
  std::filesystem::remove_all(socket_dir_, ignored);
}

std::string NodeCluster::coordinator_address() const {
  return absl::StrCat("127.0.0.1:", coordinator_port_);
}

std::string NodeCluster::socket_path(int daemon) const {
  return absl::StrCat(socket_dir_, "/node", daemon, ".sock");
}

pid_t NodeCluster::Spawn(const std::string& name, const std::string& binary,
                         const std::vector<std::string>& args) {
  Child child;
  child.out_path = absl::StrCat(dir_, "/", name, ".out");
  child.err_path = absl::StrCat(dir_, "/", name, ".err");
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  STARLING_CHECK(pid >= 0);
  if (pid == 0) {
    const int out =
        ::open(child.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        ::open(child.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  child.pid = pid;
  children_.push_back(child);
  return pid;
}

void NodeCluster::StartCoordinator() {
  Spawn("coordinator", BinaryPath("server/coordinator/starling-coordinator"),
        CoordinatorFlags({}));
}

void NodeCluster::StartDaemons() {
  for (int d = 0; d < options_.daemons; ++d) {
    daemon_pids_.push_back(Spawn(absl::StrCat("node", d),
                                 BinaryPath("server/node/starling-node"),
                                 DaemonFlags(d, {})));
  }
}

pid_t NodeCluster::StartWorker(int daemon, int index,
                               const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      absl::StrCat("--worker_socket=", socket_path(daemon)),
      absl::StrCat("--worker_index=", index),
      absl::StrCat("--dim=", options_.parameter_count)};
  args.insert(args.end(), extra.begin(), extra.end());
  return Spawn(absl::StrCat("worker", daemon, "_", index),
               BinaryPath("worker/examples/quadratic_worker"), args);
}

std::vector<pid_t> NodeCluster::StartAllWorkers(
    const std::vector<std::string>& extra) {
  std::vector<pid_t> pids;
  for (int d = 0; d < options_.daemons; ++d) {
    for (int w = 0; w < options_.local_workers; ++w) {
      pids.push_back(StartWorker(d, w, extra));
    }
  }
  return pids;
}

ProcessResult NodeCluster::Wait(pid_t pid, absl::Duration timeout) {
  ProcessResult result;
  Child* child = nullptr;
  for (Child& c : children_) {
    if (c.pid == pid) child = &c;
  }
  STARLING_CHECK(child != nullptr);
  const absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (absl::Now() > deadline) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    // Polling a child's exit with a bound: there is no fd to wait on.
    absl::SleepFor(absl::Milliseconds(20));
  }
  child->reaped = true;
  if (!result.timed_out && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  result.out = ReadFile(child->out_path);
  result.err = ReadFile(child->err_path);
  return result;
}

void NodeCluster::Kill(pid_t pid, int signal) { ::kill(pid, signal); }

coordinator::RunResult NodeCluster::CtlStatus() const {
  std::vector<std::string> command = {
      BinaryPath("server/coordinator/starlingctl"), "status",
      absl::StrCat("--coordinator=", coordinator_address()), "--timeout=2s"};
  if (!operator_secret_.empty()) {
    // starlingctl reads the operator's secret from a file of mode 600.
    const std::string file = absl::StrCat(dir_, "/operator.secret");
    {
      std::ofstream out(file, std::ios::trunc);
      out << operator_secret_;
    }
    ::chmod(file.c_str(), 0600);
    command.push_back(absl::StrCat("--secret_file=", file));
  }
  return coordinator::RunBinary(command, 10);
}

std::string NodeCluster::ServerLogs() const {
  std::string logs =
      absl::StrCat("--- coordinator stderr:\n",
                   ReadFile(absl::StrCat(dir_, "/coordinator.err")));
  for (int d = 0; d < options_.daemons; ++d) {
    absl::StrAppend(&logs, "--- node", d, " stderr:\n",
                    ReadFile(absl::StrCat(dir_, "/node", d, ".err")));
  }
  return logs;
}

std::unique_ptr<grpc::ClientContext> NodeCluster::OperatorContext(
    absl::string_view method) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  // Only the random generator can fail: the call then goes unsigned.
  (void)SignContext(context.get(), operator_secret_, CallRole::kOperator,
                    method, "", CallIdentity{"node-cluster-test", ""});
  return context;
}

bool NodeCluster::JobStatus(proto::JobStatus* status, std::string* error) {
  auto stub = proto::Coordinator::NewStub(
      grpc::CreateChannel(coordinator_address(), channel_credentials_));
  std::unique_ptr<grpc::ClientContext> context =
      OperatorContext("GetJobStatus");
  proto::GetJobStatusRequest request;
  request.set_job_id("test");
  grpc::Status s = stub->GetJobStatus(context.get(), request, status);
  if (!s.ok()) *error = s.error_message();
  return s.ok();
}

bool NodeCluster::NodeStatus(int daemon, proto::NodeStatusReply* status,
                             std::string* error) {
  auto stub = proto::NodeAdmin::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", admin_ports_[daemon]), channel_credentials_));
  std::unique_ptr<grpc::ClientContext> context = OperatorContext("GetStatus");
  context->set_wait_for_ready(true);
  grpc::Status s =
      stub->GetStatus(context.get(), proto::GetNodeStatusRequest(), status);
  if (!s.ok()) *error = s.error_message();
  return s.ok();
}

bool NodeCluster::NodeGroup(int daemon, proto::GroupReply* group,
                            std::string* error) {
  auto stub = proto::NodeAdmin::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", admin_ports_[daemon]), channel_credentials_));
  std::unique_ptr<grpc::ClientContext> context = OperatorContext("GetGroup");
  grpc::Status s =
      stub->GetGroup(context.get(), proto::GetGroupRequest(), group);
  if (!s.ok()) *error = s.error_message();
  return s.ok();
}

namespace {

// "--name=value" -> "--name".
std::string FlagName(const std::string& flag) {
  return flag.substr(0, flag.find('='));
}

// `base` with each flag of `extra` replacing the one of the same name, or
// appended.
std::vector<std::string> MergeFlags(std::vector<std::string> base,
                                    const std::vector<std::string>& extra) {
  for (const std::string& flag : extra) {
    bool replaced = false;
    for (std::string& b : base) {
      if (FlagName(b) == FlagName(flag)) {
        b = flag;
        replaced = true;
      }
    }
    if (!replaced) base.push_back(flag);
  }
  return base;
}

}  // namespace

int PickLoopbackPort() { return PickPort(); }

std::vector<std::string> NodeCluster::CoordinatorFlags(
    const std::vector<std::string>& extra) const {
  return MergeFlags(
      {"--job_id=test", absl::StrCat("--expected_nodes=", options_.daemons),
       absl::StrCat("--parameter_count=", options_.fix_parameter_count
                                              ? options_.parameter_count
                                              : 0),
       absl::StrCat("--listen=", coordinator_address()), "--metrics_port=0",
       absl::StrCat("--mode=", options_.mode),
       absl::StrCat("--optimizer=", options_.optimizer),
       absl::StrCat("--learning_rate=", options_.learning_rate),
       absl::StrCat("--collective_timeout=",
                    absl::FormatDuration(options_.collective_timeout)),
       absl::StrCat("--heartbeat_timeout=",
                    absl::FormatDuration(options_.heartbeat_timeout)),
       "--log_level=warning"},
      extra);
}

std::vector<std::string> NodeCluster::DaemonFlags(
    int daemon, const std::vector<std::string>& extra) const {
  // A suite's second target runs every daemon with these too (e.g. the
  // fabric transport: tests/node/BUILD), before the test's own.
  std::vector<std::string> suite_flags;
  if (const char* flags = std::getenv("STARLING_TEST_DAEMON_FLAGS")) {
    suite_flags = absl::StrSplit(flags, ' ', absl::SkipEmpty());
  }
  return MergeFlags(MergeFlags(DaemonBaseFlags(daemon), suite_flags), extra);
}

void NodeCluster::ExpectPeerTransports(int group_size) {
  const char* flags = std::getenv("STARLING_TEST_DAEMON_FLAGS");
  const std::string suite = flags != nullptr ? flags : "";
  std::string path = "tcp";
  if (suite.find("--transport=fabric") != std::string::npos) {
    path = "fabric (tcp;ofi_rxm)";
  } else if (suite.find("--transport=shm") != std::string::npos) {
    path = "shm";
  }
  const int peers = group_size - 1;
  const std::string want =
      absl::StrCat(path, " to ", peers, peers == 1 ? " peer" : " peers");
  for (int d = 0; d < options_.daemons; ++d) {
    if (d >= static_cast<int>(daemon_pids_.size()) || daemon_pids_[d] < 0 ||
        !Alive(daemon_pids_[d])) {
      continue;
    }
    proto::NodeStatusReply status;
    std::string error;
    ASSERT_TRUE(NodeStatus(d, &status, &error))
        << "daemon " << d << ": " << error;
    EXPECT_EQ(status.transport(), want) << "daemon " << d;
  }
}

std::vector<std::string> NodeCluster::DaemonBaseFlags(int daemon) const {
  return MergeFlags({absl::StrCat("--coordinator=", coordinator_address()),
                     "--job_id=test", absl::StrCat("--hostname=node", daemon),
                     absl::StrCat("--data_port=", data_ports_[daemon]),
                     absl::StrCat("--admin_port=", admin_ports_[daemon]),
                     absl::StrCat("--metrics_port=", metrics_ports_[daemon]),
                     absl::StrCat("--worker_socket=", socket_path(daemon)),
                     absl::StrCat("--local_workers=", options_.local_workers),
                     absl::StrCat("--worker_grace=",
                                  absl::FormatDuration(options_.worker_grace)),
                     "--timeout=30s", "--log_level=warning",
                     // The daemons of a test share this machine: auto would
                     // give them shared memory. The suites' _shm targets
                     // ask for it (suites.bzl).
                     "--transport=tcp"},
                    {});
}

pid_t NodeCluster::StartCoordinatorWith(const std::string& name,
                                        const std::vector<std::string>& extra) {
  return Spawn(name, BinaryPath("server/coordinator/starling-coordinator"),
               CoordinatorFlags(extra));
}

pid_t NodeCluster::StartDaemon(int daemon,
                               const std::vector<std::string>& extra) {
  const pid_t pid = Spawn(absl::StrCat("node", daemon),
                          BinaryPath("server/node/starling-node"),
                          DaemonFlags(daemon, extra));
  if (daemon_pids_.size() < static_cast<size_t>(options_.daemons)) {
    daemon_pids_.resize(options_.daemons, -1);
  }
  daemon_pids_[daemon] = pid;
  return pid;
}

std::string NodeCluster::Stderr(pid_t pid) const {
  for (const Child& c : children_) {
    if (c.pid == pid) return ReadFile(c.err_path);
  }
  return "";
}

std::string NodeCluster::Stdout(pid_t pid) const {
  for (const Child& c : children_) {
    if (c.pid == pid) return ReadFile(c.out_path);
  }
  return "";
}

bool NodeCluster::Alive(pid_t pid) const {
  for (const Child& c : children_) {
    if (c.pid != pid) continue;
    if (c.reaped) return false;
    // An exited child not yet reaped is a zombie: state 'Z' in its stat.
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t paren = stat.rfind(')');
    return paren != std::string::npos && paren + 2 < stat.size() &&
           stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
  }
  return false;
}

bool NodeCluster::WaitForJob(
    absl::Duration bound,
    const std::function<bool(const proto::JobStatus&)>& done,
    proto::JobStatus* last) {
  const absl::Time deadline = absl::Now() + bound;
  while (absl::Now() < deadline) {
    std::string error;
    if (JobStatus(last, &error) && done(*last)) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

bool NodeCluster::WaitForNode(
    int daemon, absl::Duration bound,
    const std::function<bool(const proto::NodeStatusReply&)>& done,
    proto::NodeStatusReply* last) {
  const absl::Time deadline = absl::Now() + bound;
  while (absl::Now() < deadline) {
    std::string error;
    if (NodeStatus(daemon, last, &error) && done(*last)) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

double FinalAccuracy(const std::string& out) {
  const std::string key = "final: test accuracy ";
  const size_t at = out.find(key);
  if (at == std::string::npos) return -1;
  return std::atof(out.c_str() + at + key.size());
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

double Metric(int port, const std::string& name,
              const std::vector<std::string>& labels) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(2);
  http.set_read_timeout(2);
  auto response = http.Get("/metrics");
  if (!response || response->status != 200)
    return std::numeric_limits<double>::quiet_NaN();
  for (absl::string_view line : absl::StrSplit(response->body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (end == absl::string_view::npos || line.substr(0, end) != name) {
      continue;
    }
    bool match = true;
    for (const std::string& label : labels) {
      match = match && line.find(label) != absl::string_view::npos;
    }
    if (!match) continue;
    double value = 0;
    const size_t space = line.rfind(' ');
    if (absl::SimpleAtod(line.substr(space + 1), &value)) return value;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

void ExpectTrainingBitIdentical(NodeCluster& cluster,
                                const std::vector<std::string>& worker_flags,
                                absl::Duration bound) {
  const std::vector<pid_t> workers = cluster.StartAllWorkers(worker_flags);
  std::string params;
  for (size_t w = 0; w < workers.size(); ++w) {
    const ProcessResult r = cluster.Wait(workers[w], bound);
    ASSERT_EQ(r.exit_code, 0)
        << "worker " << w << ": " << r.err << cluster.ServerLogs();
    if (w == 0) params = ParamsHex(r.out);
    EXPECT_EQ(ParamsHex(r.out), params) << "worker " << w;
  }
  EXPECT_FALSE(params.empty());
}

}  // namespace testing_node
}  // namespace starling
