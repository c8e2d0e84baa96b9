#include "server/node/transport_choice.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace node {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TransportChoice, AnUnknownTransportIsNamed) {
  NodeOptions options;
  options.transport = "rdma";
  absl::Status status = CheckTransportOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--transport=rdma"));
  EXPECT_THAT(status.message(), HasSubstr("not one of auto, tcp, fabric, shm"));
  for (const char* ok : {"auto", "tcp", "fabric", "shm"}) {
    options.transport = ok;
    EXPECT_OK(CheckTransportOptions(options));
  }
}

TEST(TransportChoice, ProvidersDefaultToTheFabricsThatBeatTcp) {
  NodeOptions options;
  EXPECT_THAT(FabricProviders(options), ElementsAre("verbs", "efa"));
  options.fabric_providers = {"tcp"};
  EXPECT_THAT(FabricProviders(options), ElementsAre("tcp"));
}

TEST(TransportChoice, AForcedFabricThatIsNotHereFailsAtStartNamingIt) {
  NodeOptions options;
  options.transport = "fabric";
  options.data_host = "127.0.0.1";
  options.fabric_providers = {"verbs"};
  absl::Status status = ProbeForcedFabric(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("fi_getinfo(verbs) found none"));
  EXPECT_THAT(status.message(), HasSubstr("ulimit -l is"));
  options.fabric_providers = {"tcp"};
  EXPECT_OK(ProbeForcedFabric(options));
  options.transport = "auto";
  options.fabric_providers = {"verbs"};
  EXPECT_OK(ProbeForcedFabric(options));  // auto never fails for it
}

TEST(TransportChoice, EachTransportFlagAsksForItsPaths) {
  using transport::fabric::FabricUse;
  NodeOptions options;
  options.hostname = "node1";
  transport::fabric::ConnectOptions connect = ConnectOptionsFor(options);
  EXPECT_EQ(connect.fabric, FabricUse::kAuto);
  EXPECT_EQ(connect.shm, FabricUse::kAuto);
  // This machine's, not the --hostname label's: daemons of one machine
  // share memory whatever they are called.
  EXPECT_EQ(connect.host_id, transport::fabric::LocalHostId());
  EXPECT_THAT(connect.host_id, ::testing::Not(::testing::StartsWith("node1/")));
  EXPECT_GT(connect.host_id.size(), 40u);  // the boot id follows
  options.transport = "tcp";
  connect = ConnectOptionsFor(options);
  EXPECT_EQ(connect.fabric, FabricUse::kOff);
  EXPECT_EQ(connect.shm, FabricUse::kOff);
  options.transport = "fabric";
  connect = ConnectOptionsFor(options);
  EXPECT_EQ(connect.fabric, FabricUse::kRequired);
  EXPECT_EQ(connect.shm, FabricUse::kOff);
  options.transport = "shm";
  connect = ConnectOptionsFor(options);
  EXPECT_EQ(connect.fabric, FabricUse::kOff);
  EXPECT_EQ(connect.shm, FabricUse::kRequired);
}

TEST(TransportChoice, TheSummaryCountsPeersByTransport) {
  EXPECT_EQ(TransportSummary({"", "tcp", "fabric (verbs;ofi_rxm)",
                              "fabric (verbs;ofi_rxm)"}),
            "fabric (verbs;ofi_rxm) to 2 peers, tcp to 1 peer");
  EXPECT_EQ(TransportSummary({""}), "none");
}

}  // namespace
}  // namespace node
}  // namespace starling
