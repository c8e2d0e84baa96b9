// Runs the starling-coordinator binary: start-up failures are one line and
// exit 1 (or 2 for usage), --help documents the flags.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace coordinator {
namespace {

using ::testing::HasSubstr;

std::string Coordinator() {
  return RunfilePath("server/coordinator/starling-coordinator");
}

TEST(CoordinatorMain, ListenPortInUseIsOneLineAndExitOne) {
  OccupiedPort taken;
  const RunResult result = RunBinary(
      {Coordinator(), absl::StrCat("--listen=127.0.0.1:", taken.port()),
       "--job_id=t", "--expected_nodes=1", "--metrics_port=0"},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(
      result.output,
      absl::StrCat("starling-coordinator: cannot listen on 127.0.0.1:",
                   taken.port(), ": Address already in use (--listen)\n"));
}

TEST(CoordinatorMain, MetricsPortInUseIsOneLineAndExitOne) {
  OccupiedPort taken;
  const RunResult result = RunBinary(
      {Coordinator(), "--listen=127.0.0.1:0", "--job_id=t",
       "--expected_nodes=1", absl::StrCat("--metrics_port=", taken.port())},
      20);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(CountLines(result.output), 1) << result.output;
  EXPECT_THAT(result.output, HasSubstr(absl::StrCat("127.0.0.1:", taken.port(),
                                                    ": Address already in use "
                                                    "(--metrics_port)")));
}

// Without a cluster secret or TLS client certificates anyone who reaches
// the port could join: an address other hosts reach is refused, naming the
// ways out, before anything listens.
TEST(CoordinatorMain, AnOpenAddressWithoutASecretIsRefused) {
  for (const char* listen : {"--listen=0.0.0.0:0", "--listen=[::]:0"}) {
    const RunResult result =
        RunBinary({Coordinator(), listen, "--job_id=t", "--expected_nodes=1",
                   "--metrics_port=0"},
                  20);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_EQ(CountLines(result.output), 1) << result.output;
    EXPECT_THAT(result.output,
                HasSubstr("can be reached from other hosts, and without "
                          "--cluster_secret_file"));
    EXPECT_THAT(result.output, HasSubstr("listen on 127.0.0.1, or pass "
                                         "--insecure"));
  }
}

// TLS files that are not there or not PEM are one line naming the flag.
TEST(CoordinatorMain, BadTlsFilesAreUsageErrors) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string text =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/not_pem_", ::getpid());
  {
    std::ofstream out(text);
    out << "this is no certificate\n";
  }
  const RunResult missing =
      RunBinary({Coordinator(), "--listen=127.0.0.1:0", "--job_id=t",
                 "--expected_nodes=1", "--metrics_port=0",
                 "--tls_cert_file=/nonexistent/cert.pem",
                 "--tls_key_file=/nonexistent/key.pem"},
                20);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_EQ(missing.output,
            "starling-coordinator: --tls_cert_file=/nonexistent/cert.pem: "
            "cannot be read (no such file, or no permission)\n");
  const RunResult not_pem =
      RunBinary({Coordinator(), "--listen=127.0.0.1:0", "--job_id=t",
                 "--expected_nodes=1", "--metrics_port=0",
                 absl::StrCat("--tls_cert_file=", text),
                 absl::StrCat("--tls_key_file=", text)},
                20);
  EXPECT_EQ(not_pem.exit_code, 2) << not_pem.output;
  EXPECT_THAT(not_pem.output, HasSubstr("not a PEM file"));
  const RunResult key_only =
      RunBinary({Coordinator(), "--listen=127.0.0.1:0", "--job_id=t",
                 "--expected_nodes=1", "--metrics_port=0",
                 absl::StrCat("--tls_key_file=", text)},
                20);
  EXPECT_EQ(key_only.exit_code, 2) << key_only.output;
  EXPECT_THAT(key_only.output, HasSubstr("needs --tls_cert_file"));
}

TEST(CoordinatorMain, MissingRequiredFlagIsAUsageError) {
  const RunResult result = RunBinary(
      {Coordinator(), "--listen=127.0.0.1:0", "--expected_nodes=1"}, 20);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_EQ(result.output, "starling-coordinator: --job_id is required\n");
}

TEST(CoordinatorMain, BadModesAndOptionsAreRefusedAtStartUp) {
  const struct {
    const char* flag;
    const char* message;
    const char* mode = "--mode=sync_sgd";
  } cases[] = {
      {"--elastic_beta=1.5",
       "starling-coordinator: --elastic_beta=1.5: beta (alpha times the "
       "number of workers) must be in (0, 1]\n",
       "--mode=async_measgd"},
      {"--optimizer=easgd",
       "starling-coordinator: --optimizer=easgd is the centre update of the "
       "EASGD modes (sync_easgd, async_easgd, async_measgd, hogwild_easgd, "
       "round_robin_easgd); --mode=sync_sgd takes one of none, sgd, "
       "momentum, adam\n"},
      {"--learning_rate=inf",
       "starling-coordinator: --learning_rate=inf: the learning rate must be "
       "finite and > 0\n"},
      {"--staleness=-1",
       "starling-coordinator: --staleness=-1: the staleness bound must be "
       ">= 0\n"},
      {"--mode=turbo",
       "starling-coordinator: --mode=turbo is not one of sync_sgd, async_sgd, "
       "parameter_server, sync_easgd, async_easgd, async_measgd, "
       "hogwild_easgd, round_robin_easgd\n"},
  };
  for (const auto& c : cases) {
    const RunResult result =
        RunBinary({Coordinator(), "--listen=127.0.0.1:0", "--job_id=t",
                   "--expected_nodes=1", "--metrics_port=0", c.mode, c.flag},
                  20);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_EQ(result.output, c.message);
  }
}

TEST(CoordinatorMain, HelpDescribesTheFlags) {
  const RunResult result = RunBinary({Coordinator(), "--help"}, 20);
  for (const char* flag :
       {"--listen", "--job_id", "--expected_nodes", "--heartbeat_timeout",
        "--iterations_per_schedule", "--epochs", "--metrics_port",
        "--log_level", "--parameter_count", "--mode", "--optimizer",
        "--learning_rate", "--staleness", "--partitions_per_epoch",
        "--elastic_tau", "--elastic_beta", "--elastic_momentum"}) {
    EXPECT_THAT(result.output, HasSubstr(flag));
  }
  EXPECT_THAT(result.output, HasSubstr("0 takes whatever the workers "
                                       "declare"));
  EXPECT_THAT(result.output, HasSubstr("round_robin_easgd"));
  EXPECT_THAT(result.output, HasSubstr("coordinator of one Starling"));
  EXPECT_THAT(result.output, HasSubstr("one mini-batch of one worker"));
  EXPECT_THAT(result.output, HasSubstr("partition p of an epoch is samples"));
}

}  // namespace
}  // namespace coordinator
}  // namespace starling
