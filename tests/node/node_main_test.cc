// starling-node's start-up failures exit 1 with one error line: a
// coordinator it cannot reach within --timeout (after logging why while it
// retried), and data/admin ports in use.
#include <string>
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

std::string Socket() {
  return absl::StrCat("/tmp/starling-node-main-test-", ::getpid(), ".sock");
}

TEST(NodeMain, UnreachableCoordinatorIsLoggedWithItsCauseThenOneErrorLine) {
  const int nobody = coordinator::PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", nobody);
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), absl::StrCat("--coordinator=", address), "--job_id=j",
       absl::StrCat("--data_port=", coordinator::PickFreePort()),
       "--admin_port=0", "--metrics_port=0",
       absl::StrCat("--worker_socket=", Socket()), "--timeout=2s"},
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
  coordinator::OccupiedPort taken;
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), "--coordinator=127.0.0.1:1", "--job_id=j",
       absl::StrCat("--data_port=", taken.port()), "--admin_port=0",
       "--metrics_port=0", absl::StrCat("--worker_socket=", Socket())},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr(absl::StrCat("port ", taken.port(), " (--data_port)")));
  EXPECT_THAT(result.output, HasSubstr("in use"));
}

TEST(NodeMain, AdminPortInUseIsOneLineNamingThePort) {
  coordinator::OccupiedPort taken;
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), "--coordinator=127.0.0.1:1", "--job_id=j",
       absl::StrCat("--data_port=", coordinator::PickFreePort()),
       absl::StrCat("--admin_port=", taken.port()), "--metrics_port=0",
       absl::StrCat("--worker_socket=", Socket())},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr(absl::StrCat("port ", taken.port(),
                                                    " (--admin_port)")));
}

TEST(NodeMain, HelpListsTheFlags) {
  coordinator::RunResult result =
      coordinator::RunBinary({Node(), "--help"}, 20);
  for (const char* flag : {"--coordinator", "--job_id", "--data_address",
                           "--data_port", "--admin_port", "--worker_socket",
                           "--metrics_port", "--log_level", "--timeout"}) {
    EXPECT_THAT(result.output, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace testing_node
}  // namespace starling
