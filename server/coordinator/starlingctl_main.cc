// starlingctl: command-line view of a running Starling job.
//
//   starlingctl status --coordinator=host:port [--job_id=NAME] [--timeout=5s]
//   starlingctl inflight --coordinator=host:port [--job_id=NAME] [--timeout=5s]
//
// `status` prints the group as a table (job_status_table.h); `inflight` asks
// every node daemon's admin service (addresses from the coordinator) for
// its collectives in flight and prints who is missing (inflight_table.h). Exit
// status: 0 on success, 1 when the coordinator cannot be reached or refuses
// (one line on stderr naming the address and the deadline), 2 for bad usage.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "proto/node_admin.grpc.pb.h"
#include "server/base/call_credential.h"
#include "server/base/command_line.h"
#include "server/base/grpc_server.h"
#include "server/base/grpc_status.h"
#include "server/base/listen_address.h"
#include "server/base/version.h"
#include "server/coordinator/inflight_table.h"
#include "server/coordinator/job_status_table.h"
#include "server/transport/auth.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:29400",
          "host:port of the job's coordinator");
ABSL_FLAG(std::string, job_id, "",
          "job to show; empty: whichever job the coordinator runs");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "deadline for the coordinator's answer");
ABSL_FLAG(std::string, secret_file, "",
          "file holding the operators' secret (the services' "
          "--operator_secret_file) or the cluster secret (mode 600): every "
          "call then carries a fresh operator credential under it, which "
          "services started with a secret require");
ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA certificate(s) that signed the coordinator's and nodes' "
          "certificates: talk TLS and verify them");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate, for services that require one (mutual "
          "TLS; with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");

namespace starling {
namespace coordinator {
namespace {

constexpr char kProgram[] = "starlingctl";

int Fail(int code, absl::string_view message) {
  return FailProgram(kProgram, code, message);
}

// How starlingctl reaches the services: the channel credentials (TLS or
// not) and the operator secret its calls are signed under ("" for none).
struct Access {
  std::shared_ptr<grpc::ChannelCredentials> channel;
  std::string secret;
  std::string host;  // this machine's name, which the calls carry
};

absl::StatusOr<Access> AccessFromFlags() {
  Access access;
  absl::StatusOr<std::string> secret = transport::SecretFromFlag(
      "--secret_file", absl::GetFlag(FLAGS_secret_file));
  if (!secret.ok()) return secret.status();
  access.secret = *std::move(secret);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel =
      ChannelCredentialsFor({.cert_file = absl::GetFlag(FLAGS_tls_cert_file),
                             .key_file = absl::GetFlag(FLAGS_tls_key_file),
                             .ca_file = absl::GetFlag(FLAGS_tls_ca_file)});
  if (!channel.ok()) return channel.status();
  access.channel = *std::move(channel);
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  access.host = absl::StrCat("starlingctl@", host);
  return access;
}

// Sets `context`'s deadline and, with a secret, signs it for `method`.
absl::Status Prepare(const Access& access, absl::string_view method,
                     absl::Duration timeout, grpc::ClientContext* context) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return SignContext(context, access.secret, CallRole::kOperator, method, "",
                     CallIdentity{access.host, ""});
}

// The coordinator's JobStatus, or the exit status after a one-line error.
absl::StatusOr<proto::JobStatus> FetchJobStatus(const Access& access,
                                                int* exit_code) {
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  auto stub =
      proto::Coordinator::NewStub(grpc::CreateChannel(address, access.channel));
  grpc::ClientContext context;
  if (absl::Status prepared =
          Prepare(access, "GetJobStatus", timeout, &context);
      !prepared.ok()) {
    *exit_code = Fail(1, prepared.message());
    return prepared;
  }
  proto::GetJobStatusRequest request;
  request.set_job_id(absl::GetFlag(FLAGS_job_id));
  proto::JobStatus response;
  const absl::Status status =
      FromGrpcStatus(stub->GetJobStatus(&context, request, &response));
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    *exit_code = Fail(
        1, absl::StrCat("cannot reach the coordinator at ", address, " within ",
                        absl::FormatDuration(timeout), ": ", status.message()));
    return status;
  }
  if (absl::IsUnimplemented(status)) {
    // gRPC's answer for a service the server does not have: bare text.
    *exit_code =
        Fail(1, absl::StrCat("the server at ", address,
                             " is not a Starling coordinator (it has no "
                             "Coordinator.GetJobStatus: a node daemon's admin "
                             "port? the coordinator listens at its --listen, "
                             "port 29400 by default)"));
    return status;
  }
  if (absl::IsPermissionDenied(status)) {
    *exit_code = Fail(
        1, absl::StrCat("coordinator at ", address,
                        " refused the status request: ", status.message(),
                        access.secret.empty()
                            ? " (starlingctl --secret_file signs the calls)"
                            : ""));
    return status;
  }
  if (!status.ok()) {
    *exit_code = Fail(
        1, absl::StrCat("coordinator at ", address,
                        " refused the status request: ", status.ToString()));
    return status;
  }
  return response;
}

int Status(const Access& access) {
  int exit_code = 0;
  absl::StatusOr<proto::JobStatus> job = FetchJobStatus(access, &exit_code);
  if (!job.ok()) return exit_code;
  std::fputs(FormatJobStatusTable(*job).c_str(), stdout);
  return 0;
}

int InFlight(const Access& access) {
  int exit_code = 0;
  absl::StatusOr<proto::JobStatus> job = FetchJobStatus(access, &exit_code);
  if (!job.ok()) return exit_code;
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  std::vector<NodeCollectives> nodes;
  for (const proto::NodeStatus& node : job->nodes()) {
    if (node.peer().rank() < 0) continue;  // still joining: no rank yet
    NodeCollectives n;
    n.rank = node.peer().rank();
    n.hostname = node.peer().hostname();
    n.admin_address = node.peer().admin_address();
    n.reply = absl::UnavailableError("not asked");
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) {
    std::printf(
        "job %s: the group has not formed yet (starlingctl status "
        "shows who joined)\n",
        job->job_id().c_str());
    return 0;
  }
  // Every daemon is asked at once, so that one that hangs costs the
  // timeout once, not once per node.
  std::vector<std::thread> askers;
  for (NodeCollectives& n : nodes) {
    askers.emplace_back([&n, &access, timeout] {
      if (n.admin_address.empty()) {
        n.reply = absl::FailedPreconditionError(
            "the daemon runs without an admin service (--admin_port=0)");
        return;
      }
      auto stub = proto::NodeAdmin::NewStub(
          grpc::CreateChannel(n.admin_address, access.channel));
      grpc::ClientContext context;
      if (absl::Status prepared =
              Prepare(access, "GetCollectives", timeout, &context);
          !prepared.ok()) {
        n.reply = prepared;
        return;
      }
      proto::CollectivesReply reply;
      const absl::Status status = FromGrpcStatus(stub->GetCollectives(
          &context, proto::GetCollectivesRequest(), &reply));
      if (status.ok()) {
        n.reply = std::move(reply);
      } else {
        n.reply = absl::Status(
            status.code(), absl::StrCat(status.message(), " (within ",
                                        absl::FormatDuration(timeout), ")"));
      }
    });
  }
  for (std::thread& t : askers) t.join();
  std::fputs(FormatInFlightTable(*job, nodes).c_str(), stdout);
  return 0;
}

int Main(int argc, char** argv) {
  const std::vector<char*> args = ParseProgramCommandLine(
      {kProgram, "server/coordinator/starlingctl_main.cc", kStarlingVersion,
       "command-line view of a running Starling job.\n\n"
       "  starlingctl status --coordinator=host:port [--job_id=NAME] "
       "[--timeout=5s] [--secret_file=PATH] [--tls_ca_file=PATH]\n\n"
       "status: the group as a table (rank, hostname, address, health, shard "
       "and optimizer state sizes, heartbeat age, last error); each node's "
       "run and workers (a MISSING worker with its grace left); the job's "
       "epoch, iteration and degraded flag; the runs (the current one and "
       "the recent ones with their outcome and error); the last error.\n\n"
       "  starlingctl inflight --coordinator=host:port [--job_id=NAME] "
       "[--timeout=5s]\n\n"
       "inflight: asks every node daemon's admin service for the collectives "
       "it runs now: per rank the op (sequence number and fingerprint: op, "
       "dtype, length, algorithm), for how long, and which ranks it has not "
       "heard from; then who is missing: each rank the others wait for and "
       "what it does instead.\n\n"
       "Services started with a secret take only signed calls: "
       "--secret_file names the operators' secret (or the cluster secret)."},
      argc, argv);
  if (args.size() < 2) {
    return Fail(2,
                "missing command; usage: starlingctl status|inflight "
                "--coordinator=host:port (try --help)");
  }
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  absl::StatusOr<HostPort> parsed = ParseHostPort(address);
  if (parsed.ok() && parsed->port == 0) {
    parsed = absl::InvalidArgumentError(
        "port 0: give the port the coordinator listens on (1-65535)");
  }
  if (!parsed.ok()) {
    return Fail(2, absl::StrCat("--coordinator=", address, ": ",
                                parsed.status().message()));
  }
  const std::string command = args[1];
  if ((command != "status" && command != "inflight") || args.size() > 2) {
    return Fail(2, absl::StrCat("unknown command '", command,
                                args.size() > 2 ? " ...'" : "'",
                                "; the commands are 'status' and 'inflight' "
                                "(try --help)"));
  }
  absl::StatusOr<Access> access = AccessFromFlags();
  if (!access.ok()) return Fail(2, access.status().message());
  return command == "status" ? Status(*access) : InFlight(*access);
}

}  // namespace
}  // namespace coordinator
}  // namespace starling

int main(int argc, char** argv) {
  return starling::coordinator::Main(argc, argv);
}
