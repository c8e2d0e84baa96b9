#include "server/metrics/metrics_http_server.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/base/status_matchers.h"
#include "server/metrics/text_format.h"

namespace starling {
namespace metrics {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<httplib::Client> LocalClient(int port) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_connection_timeout(5, 0);
  client->set_read_timeout(5, 0);
  client->set_write_timeout(5, 0);
  return client;
}

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(
        CounterFamily * failures,
        registry_.AddCounter("starling_test_failures_total", "Failures."));
    failures->Get()->Increment(2);
  }

  MetricsRegistry registry_;
};

TEST_F(MetricsHttpServerTest, ServesTheRegistryAtSlashMetrics) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsHttpServer> server,
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
  ASSERT_GT(server->port(), 0);
  EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));

  auto client = LocalClient(server->port());
  httplib::Result result = client->Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->get_header_value("Content-Type"), kTextFormatContentType);
  EXPECT_THAT(result->body, HasSubstr("starling_test_failures_total 2\n"));

  // Later updates show in the next scrape.
  registry_.AddGauge("starling_test_group_size", "Size.")
      .value()
      ->Get()
      ->Set(4);
  result = client->Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_THAT(result->body, HasSubstr("starling_test_group_size 4\n"));

  result = client->Get("/nothing-here");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
}

TEST_F(MetricsHttpServerTest, HealthzAndReadyzAnswerTheProbes) {
  absl::Mutex mu;
  absl::Status ready = absl::UnavailableError("joining the coordinator");
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsHttpServer> server,
                       MetricsHttpServer::Start(
                           {.host = "127.0.0.1", .port = 0}, &registry_, [&] {
                             absl::MutexLock lock(&mu);
                             return ready;
                           }));
  auto client = LocalClient(server->port());
  httplib::Result result = client->Get("/healthz");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "ok\n");

  result = client->Get("/readyz");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 503);
  EXPECT_EQ(result->body, "not ready: joining the coordinator\n");

  {
    absl::MutexLock lock(&mu);
    ready = absl::OkStatus();
  }
  result = client->Get("/readyz");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  EXPECT_EQ(result->body, "ready\n");
}

TEST_F(MetricsHttpServerTest, ReadyWithoutAReadinessCheck) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsHttpServer> server,
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
  httplib::Result result = LocalClient(server->port())->Get("/readyz");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
}

TEST_F(MetricsHttpServerTest, PortInUseIsAClearError) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsHttpServer> first,
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
  EXPECT_THAT(MetricsHttpServer::Start(
                  {.host = "127.0.0.1", .port = first->port()}, &registry_)
                  .status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat(
                           "cannot serve /metrics on 127.0.0.1:", first->port(),
                           ": bind failed (port already in use"))));
}

TEST_F(MetricsHttpServerTest, RefusesPortsOutOfRange) {
  EXPECT_THAT(
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 70000}, &registry_)
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("70000")));
}

TEST_F(MetricsHttpServerTest, StopClosesThePortAndIsIdempotent) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsHttpServer> server,
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
  const int port = server->port();
  server->Stop();
  server->Stop();
  auto client = LocalClient(port);
  client->set_connection_timeout(1, 0);
  EXPECT_FALSE(client->Get("/metrics"));
  // The port is free again.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<MetricsHttpServer> again,
                       MetricsHttpServer::Start(
                           {.host = "127.0.0.1", .port = port}, &registry_));
  EXPECT_EQ(again->port(), port);
}

TEST_F(MetricsHttpServerTest, StopRightAfterStartDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<MetricsHttpServer> server,
        MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
    server->Stop();
  }
}

}  // namespace
}  // namespace metrics
}  // namespace starling
