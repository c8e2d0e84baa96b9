#include "server/node/telemetry/node_metrics.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"
#include "server/metrics/metrics_registry.h"
#include "server/metrics/text_format.h"

namespace starling {
namespace node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The exported lines of starling_node_peer_transport (HELP and TYPE left
// out).
std::string PeerTransportLines(const metrics::MetricsRegistry& registry) {
  std::string lines;
  for (const metrics::FamilySnapshot& family : registry.Collect()) {
    if (family.name != "starling_node_peer_transport") continue;
    for (absl::string_view line :
         absl::StrSplit(metrics::EncodeTextFormat({family}), '\n')) {
      if (!line.empty() && line[0] != '#') {
        absl::StrAppend(&lines, line, "\n");
      }
    }
  }
  return lines;
}

TEST(NodeMetrics, RegistersOnceOnly) {
  metrics::MetricsRegistry registry;
  ASSERT_OK(NodeMetrics::Register(&registry).status());
  EXPECT_THAT(NodeMetrics::Register(&registry).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(NodeMetrics, PeerTransportIsOneForEachPeerOfThePlane) {
  metrics::MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(NodeMetrics m, NodeMetrics::Register(&registry));
  // No plane yet: no series.
  EXPECT_EQ(PeerTransportLines(registry), "");
  const std::string text = metrics::EncodeTextFormat(registry.Collect());
  EXPECT_THAT(text, HasSubstr("# TYPE starling_node_peer_transport gauge\n"));

  // Rank 1 of 4: this rank has no series.
  m.peer_transports->Set(
      {"fabric (verbs;ofi_rxm)", "", "tcp", "fabric (verbs;ofi_rxm)"});
  EXPECT_EQ(PeerTransportLines(registry),
            "starling_node_peer_transport{peer=\"0\",transport=\"fabric "
            "(verbs;ofi_rxm)\"} 1\n"
            "starling_node_peer_transport{peer=\"2\",transport=\"tcp\"} 1\n"
            "starling_node_peer_transport{peer=\"3\",transport=\"fabric "
            "(verbs;ofi_rxm)\"} 1\n");
}

TEST(NodeMetrics, PeerTransportsOfAnEarlierPlaneDropToZero) {
  metrics::MetricsRegistry registry;
  ASSERT_OK_AND_ASSIGN(NodeMetrics m, NodeMetrics::Register(&registry));
  m.peer_transports->Set({"", "fabric (verbs;ofi_rxm)", "tcp"});
  // The group re-formed: rank 2 is gone, rank 1 now by TCP.
  m.peer_transports->Set({"", "tcp"});
  EXPECT_EQ(PeerTransportLines(registry),
            "starling_node_peer_transport{peer=\"1\",transport=\"fabric "
            "(verbs;ofi_rxm)\"} 0\n"
            "starling_node_peer_transport{peer=\"1\",transport=\"tcp\"} 1\n"
            "starling_node_peer_transport{peer=\"2\",transport=\"tcp\"} 0\n");
  // A series of both planes stays 1; no plane at all: every one is 0.
  m.peer_transports->Set({"", "tcp"});
  EXPECT_THAT(
      PeerTransportLines(registry),
      HasSubstr("starling_node_peer_transport{peer=\"1\",transport=\"tcp\"} "
                "1\n"));
  m.peer_transports->Set({});
  EXPECT_THAT(PeerTransportLines(registry), Not(HasSubstr("} 1\n")));
}

}  // namespace
}  // namespace node
}  // namespace starling
