// What authentication costs on the control plane: the latency of one
// heartbeat (a node's most frequent call) and one status call (starlingctl
// status) against a real coordinator on loopback, in the clear, with
// per-call HMAC credentials, over TLS, and over mutual TLS with
// credentials (the full set), each on one kept channel as a node keeps
// it. Prints a table of medians and 90th percentiles and each median's
// ratio to the plain one.
//
//   bazel run --config=opt //tests/security:control_plane_bench
//   (add -- --calls=N for another count; default 2000)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/base/clock.h"
#include "server/base/grpc_server.h"
#include "server/base/logging.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/test_binaries.h"
#include "server/metrics/metrics_registry.h"
#include "tests/security/test_certificates.h"

ABSL_FLAG(int, calls, 2000, "timed calls of each kind per configuration");

namespace starling {
namespace testing_security {
namespace {

constexpr char kJob[] = "bench";
constexpr char kSecret[] = "control-plane bench cluster secret";
constexpr char kHost[] = "bench-node";
constexpr char kAddress[] = "127.0.0.1:30000";

struct Config {
  const char* name;
  bool hmac;
  bool tls;
  bool mutual;
};

struct Latency {
  double median_us = 0;
  double p90_us = 0;
};

Latency Summarise(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

// Signs under `key` (a member's own, from its JoinResponse) where given,
// else under the cluster secret, as a node does.
void Sign(const Config& config, CallRole role, const char* method,
          grpc::ClientContext* context, const std::string& key = "") {
  context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  const bool member = role == CallRole::kMember;
  const std::string secret = !config.hmac  ? ""
                             : key.empty() ? std::string(kSecret)
                                           : key;
  const absl::Status signed_call =
      SignContext(context, secret, role, method, member ? kJob : "",
                  CallIdentity{kHost, member ? kAddress : ""});
  STARLING_CHECK(signed_call.ok()) << signed_call;
}

// Heartbeat and status latencies under `config`.
absl::StatusOr<std::pair<Latency, Latency>> Measure(
    const Config& config, TestCertificateAuthority& ca, int calls) {
  TlsFiles server_tls, client_tls;
  if (config.tls) {
    absl::StatusOr<IssuedFiles> server =
        ca.Issue("bench-server", "IP:127.0.0.1");
    absl::StatusOr<IssuedFiles> client =
        ca.Issue("bench-client", "IP:127.0.0.1");
    if (!server.ok()) return server.status();
    if (!client.ok()) return client.status();
    server_tls = {server->cert_file, server->key_file,
                  config.mutual ? ca.ca_file() : ""};
    client_tls = {config.mutual ? client->cert_file : "",
                  config.mutual ? client->key_file : "", ca.ca_file()};
  }
  RealClock clock;
  metrics::MetricsRegistry registry;
  coordinator::CoordinatorOptions options;
  options.job_id = kJob;
  options.expected_nodes = 1;
  options.cluster_secret = config.hmac ? kSecret : "";
  absl::StatusOr<std::unique_ptr<coordinator::Coordinator>> made =
      coordinator::Coordinator::Create(options, &clock, &registry);
  if (!made.ok()) return made.status();
  coordinator::CoordinatorService service(made->get());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      ServerCredentialsFor(server_tls);
  if (!server_credentials.ok()) return server_credentials.status();
  const int port = coordinator::PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      ServeGrpc(address, &service, "bench", *server_credentials);
  if (!server.ok()) return server.status();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
      channel_credentials = ChannelCredentialsFor(client_tls);
  if (!channel_credentials.ok()) return channel_credentials.status();
  auto stub = proto::Coordinator::NewStub(
      grpc::CreateChannel(address, *channel_credentials));

  proto::JoinRequest join;
  join.set_job_id(kJob);
  join.set_hostname(kHost);
  join.set_data_address(kAddress);
  join.set_version((*made)->options().version);
  join.mutable_capabilities()->set_local_workers(1);
  proto::JoinResponse joined;
  {
    grpc::ClientContext context;
    Sign(config, CallRole::kMember, "Join", &context);
    const grpc::Status status = stub->Join(&context, join, &joined);
    if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("join: ", status.error_message()));
    }
  }
  proto::HeartbeatRequest beat;
  beat.set_job_id(kJob);
  beat.set_rank(joined.rank());
  beat.set_group_epoch(joined.group_epoch());
  std::vector<double> beats, statuses;
  const int warm = 100;
  for (int i = 0; i < warm + calls; ++i) {
    grpc::ClientContext context;
    const absl::Time start = absl::Now();
    Sign(config, CallRole::kMember, "Heartbeat", &context, joined.member_key());
    proto::HeartbeatResponse answer;
    const grpc::Status status = stub->Heartbeat(&context, beat, &answer);
    const double us = absl::ToDoubleMicroseconds(absl::Now() - start);
    if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("heartbeat: ", status.error_message()));
    }
    if (i >= warm) beats.push_back(us);
  }
  for (int i = 0; i < warm + calls; ++i) {
    grpc::ClientContext context;
    const absl::Time start = absl::Now();
    Sign(config, CallRole::kOperator, "GetJobStatus", &context);
    proto::JobStatus answer;
    const grpc::Status status =
        stub->GetJobStatus(&context, proto::GetJobStatusRequest(), &answer);
    const double us = absl::ToDoubleMicroseconds(absl::Now() - start);
    if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("status: ", status.error_message()));
    }
    if (i >= warm) statuses.push_back(us);
  }
  (*made)->Shutdown();
  (*server)->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  return std::make_pair(Summarise(beats), Summarise(statuses));
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  SetMinLogSeverity(LogSeverity::kWarning);
  const int calls = absl::GetFlag(FLAGS_calls);
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/starling-cp-bench-", ::getpid());
  if (std::system(absl::StrCat("mkdir -p ", dir).c_str()) != 0) return 1;
  absl::StatusOr<std::unique_ptr<TestCertificateAuthority>> ca =
      TestCertificateAuthority::Create(dir, "bench");
  if (!ca.ok()) {
    std::fprintf(stderr, "%s\n", ca.status().ToString().c_str());
    return 1;
  }
  const Config configs[] = {
      {"plain (no secret, no TLS)", false, false, false},
      {"HMAC per call", true, false, false},
      {"TLS (server certificate)", false, true, false},
      {"mutual TLS + HMAC per call", true, true, true},
  };
  std::printf(
      "# control-plane call latency, coordinator on 127.0.0.1, one kept "
      "channel, %d calls each (after 100 unmeasured)\n",
      calls);
  std::printf("%-28s %14s %12s %8s %14s %12s %8s\n", "configuration",
              "heartbeat_med", "heartbeat_p90", "x_plain", "status_med",
              "status_p90", "x_plain");
  double plain_beat = 0, plain_status = 0;
  for (const Config& config : configs) {
    absl::StatusOr<std::pair<Latency, Latency>> measured =
        Measure(config, **ca, calls);
    if (!measured.ok()) {
      std::fprintf(stderr, "%s: %s\n", config.name,
                   measured.status().ToString().c_str());
      return 1;
    }
    const auto& [beat, status] = *measured;
    if (plain_beat == 0) {
      plain_beat = beat.median_us;
      plain_status = status.median_us;
    }
    std::printf("%-28s %11.0f us %9.0f us %7.2fx %11.0f us %9.0f us %7.2fx\n",
                config.name, beat.median_us, beat.p90_us,
                beat.median_us / plain_beat, status.median_us, status.p90_us,
                status.median_us / plain_status);
    std::fflush(stdout);
  }
  return std::system(absl::StrCat("rm -rf ", dir).c_str()) == 0 ? 0 : 1;
}

}  // namespace
}  // namespace testing_security
}  // namespace starling

int main(int argc, char** argv) {
  return starling::testing_security::Main(argc, argv);
}
