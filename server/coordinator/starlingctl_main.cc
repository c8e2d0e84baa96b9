// starlingctl: command-line view of a running Starling job.
//
//   starlingctl status --coordinator=host:port [--job_id=NAME] [--timeout=5s]
//
// prints the group as a table (job_status_table.h). Exit status: 0 on
// success, 1 when the coordinator cannot be reached or refuses (one line on
// stderr naming the address and the deadline), 2 for bad usage.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "server/base/command_line.h"
#include "server/base/grpc_status.h"
#include "server/base/version.h"
#include "server/coordinator/job_status_table.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:29400",
          "host:port of the job's coordinator");
ABSL_FLAG(std::string, job_id, "",
          "job to show; empty: whichever job the coordinator runs");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "deadline for the coordinator's answer");

namespace starling {
namespace coordinator {
namespace {

constexpr char kProgram[] = "starlingctl";

int Fail(int code, absl::string_view message) {
  return FailProgram(kProgram, code, message);
}

int Status() {
  const std::string address = absl::GetFlag(FLAGS_coordinator);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  auto stub = proto::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  proto::GetJobStatusRequest request;
  request.set_job_id(absl::GetFlag(FLAGS_job_id));
  proto::JobStatus response;
  const absl::Status status =
      FromGrpcStatus(stub->GetJobStatus(&context, request, &response));
  if (absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status)) {
    return Fail(
        1, absl::StrCat("cannot reach the coordinator at ", address, " within ",
                        absl::FormatDuration(timeout), ": ", status.message()));
  }
  if (!status.ok()) {
    return Fail(
        1, absl::StrCat("coordinator at ", address,
                        " refused the status request: ", status.ToString()));
  }
  std::fputs(FormatJobStatusTable(response).c_str(), stdout);
  return 0;
}

int Main(int argc, char** argv) {
  const std::vector<char*> args = ParseProgramCommandLine(
      {kProgram, "server/coordinator/starlingctl_main.cc", kStarlingVersion,
       "command-line view of a running Starling job.\n\n"
       "  starlingctl status --coordinator=host:port [--job_id=NAME] "
       "[--timeout=5s]\n\n"
       "status: the group as a table (rank, hostname, address, health, shard "
       "and optimizer state sizes, heartbeat age, last error); each node's "
       "run and workers (a MISSING worker with its grace left); the job's "
       "epoch, iteration and degraded flag; the runs (the current one and "
       "the recent ones with their outcome and error); the last error."},
      argc, argv);
  if (args.size() < 2) {
    return Fail(2,
                "missing command; usage: starlingctl status "
                "--coordinator=host:port (try --help)");
  }
  const std::string command = args[1];
  if (command != "status" || args.size() > 2) {
    return Fail(2, absl::StrCat("unknown command '", command,
                                args.size() > 2 ? " ...'" : "'",
                                "; the only command is 'status' (try --help)"));
  }
  return Status();
}

}  // namespace
}  // namespace coordinator
}  // namespace starling

int main(int argc, char** argv) {
  return starling::coordinator::Main(argc, argv);
}
