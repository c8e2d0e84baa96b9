// starling-node's start-up failures are one line and exit 1: a coordinator
// it cannot reach within --timeout, and data/admin ports in use.
#include <string>

#include "absl/strings/str_cat.h"
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

TEST(NodeMain, UnreachableCoordinatorIsOneLineNamingAddressAndDeadline) {
  const int nobody = coordinator::PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", nobody);
  coordinator::RunResult result = coordinator::RunBinary(
      {Node(), absl::StrCat("--coordinator=", address), "--job_id=j",
       absl::StrCat("--data_port=", coordinator::PickFreePort()),
       "--admin_port=0", "--metrics_port=0",
       absl::StrCat("--worker_socket=", Socket()), "--timeout=2s"},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(coordinator::CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output,
              HasSubstr(absl::StrCat("could not reach the coordinator at ",
                                     address, " within 2s")));
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
