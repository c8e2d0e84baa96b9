// starling-node's start-up failures exit 1 with one error line: a
// coordinator it cannot reach within --timeout (after logging why while it
// retried), and data/admin ports in use.
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace testing_node {
namespace {

using ::testing::HasSubstr;

std::string Node() {
  return coordinator::RunfilePath("server/node/starling-node");
}

// A worker socket path of the test's own, in a fresh directory under /tmp
// (Unix socket paths are limited to 107 bytes; TEST_TMPDIR is longer),
// removed with its contents (the socket's lock file) on destruction. Not
// named after the pid: sandboxed runs of this test share /tmp and pids.
class SocketDir {
 public:
  SocketDir() {
    char dir[] = "/tmp/starling-node-main-test-XXXXXX";
    if (::mkdtemp(dir) != nullptr) dir_ = dir;
  }
  ~SocketDir() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  SocketDir(const SocketDir&) = delete;
  SocketDir& operator=(const SocketDir&) = delete;

  std::string path() const { return dir_ + "/node.sock"; }

 private:
  std::string dir_;
};

TEST(NodeMain, UnreachableCoordinatorIsLoggedWithItsCauseThenOneErrorLine) {
  const SocketDir socket;
  const int nobody = coordinator::PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", nobody);
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), absl::StrCat("--coordinator=", address), "--job_id=j",
       absl::StrCat("--data_port=", coordinator::PickFreePort()),
       "--admin_port=0", "--metrics_port=0",
       absl::StrCat("--worker_socket=", socket.path()), "--timeout=2s"},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  // While retrying, the node says why (the first failure at once), then
  // ends with one error line naming the address, the deadline and cause.
  const std::vector<std::string> lines =
      absl::StrSplit(result.output, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 2u) << result.output;
  EXPECT_THAT(lines.front(),
              HasSubstr(absl::StrCat("at the coordinator ", address,
                                     " failed, retrying")));
  EXPECT_THAT(lines.front(), HasSubstr("Connection refused"));
  EXPECT_THAT(lines.back(),
              HasSubstr(absl::StrCat("starling-node: could not reach the "
                                     "coordinator at ",
                                     address, " within 2s")));
  EXPECT_THAT(lines.back(), HasSubstr("Connection refused"));
}

TEST(NodeMain, DataPortInUseIsOneLineNamingThePort) {
  const SocketDir socket;
  coordinator::OccupiedPort taken;
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), "--coordinator=127.0.0.1:1", "--job_id=j",
       absl::StrCat("--data_port=", taken.port()), "--admin_port=0",
       "--metrics_port=0", absl::StrCat("--worker_socket=", socket.path())},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr(absl::StrCat("port ", taken.port(), " (--data_port)")));
  EXPECT_THAT(result.output, HasSubstr("in use"));
}

TEST(NodeMain, AdminPortInUseIsOneLineNamingThePort) {
  const SocketDir socket;
  coordinator::OccupiedPort taken;
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), "--coordinator=127.0.0.1:1", "--job_id=j",
       absl::StrCat("--data_port=", coordinator::PickFreePort()),
       absl::StrCat("--admin_port=", taken.port()), "--metrics_port=0",
       absl::StrCat("--worker_socket=", socket.path())},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr(absl::StrCat("port ", taken.port(),
                                                    " (--admin_port)")));
}

TEST(NodeMain, HelpListsTheFlags) {
  coordinator::RunResult result =
      coordinator::RunBinary({Node(), "--help"}, 20);
  for (const char* flag :
       {"--coordinator", "--job_id", "--data_address", "--data_port",
        "--admin_port", "--worker_socket", "--metrics_port", "--log_level",
        "--timeout", "--wait_spin", "--loop_spin", "--tcp_send_buffer_bytes"}) {
    EXPECT_THAT(result.output, HasSubstr(flag));
  }
}

// The data plane's polls and send buffer: a value out of range is one line
// naming the flag and the range, before anything starts.
TEST(NodeMain, DataPlaneTuningOutOfRangeIsOneLineNamingTheFlag) {
  const SocketDir socket;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--loop_spin=2s", "--loop_spin=2s must be between 0 and 1s"},
      {"--wait_spin=-5us", "--wait_spin=-5us must be between 0 and 1s"},
      {"--tcp_send_buffer_bytes=-1",
       "--tcp_send_buffer_bytes=-1 must be >= 0"}};
  for (const auto& [flag, message] : cases) {
    coordinator::RunResult result = coordinator::RunBinary(
        {Node(), "--coordinator=127.0.0.1:1", "--job_id=j", "--data_port=0",
         "--admin_port=0", "--metrics_port=0",
         absl::StrCat("--worker_socket=", socket.path()), flag},
        20);
    EXPECT_NE(result.exit_code, 0) << flag << ": " << result.output;
    EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
    EXPECT_THAT(result.output, HasSubstr(message));
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
