#include "server/transport/rdma/rdma_probe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace transport {
namespace rdma {
namespace {

using ::testing::HasSubstr;

TEST(RdmaProbe, ProbeAnswersAndTheChoiceIsTcp) {
  const auto probe = ProbeRdmaDevices();
  if (!probe.ok()) {
    // The usual case here: no device.
    EXPECT_THAT(probe, StatusIs(absl::StatusCode::kUnavailable,
                                HasSubstr("no RDMA device found; using TCP")));
  } else {
    EXPECT_FALSE(probe->empty());
  }
  const TransportChoice choice = SelectTransportKind(probe);
  EXPECT_EQ(choice.kind, TransportKind::kTcp);
  EXPECT_THAT(choice.reason, HasSubstr("using TCP"));
}

TEST(RdmaProbe, NoDeviceSaysSoOnce) {
  const TransportChoice choice = SelectTransportKind(
      absl::UnavailableError("no RDMA device found; using TCP"));
  EXPECT_EQ(choice.kind, TransportKind::kTcp);
  EXPECT_EQ(choice.reason, "no RDMA device found; using TCP");
}

TEST(RdmaProbe, DevicesWithoutTransportStillPickTcp) {
  const TransportChoice choice =
      SelectTransportKind(std::vector<RdmaDevice>{{"mlx5_0", "00"}});
  EXPECT_EQ(choice.kind, TransportKind::kTcp);
  EXPECT_THAT(choice.reason, HasSubstr("mlx5_0"));
}

}  // namespace
}  // namespace rdma
}  // namespace transport
}  // namespace starling
