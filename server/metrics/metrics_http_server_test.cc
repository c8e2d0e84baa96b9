#include "server/metrics/metrics_http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

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

// A client that connects and then sends only part of a request, or
// nothing: the file descriptor of its connection (-1 if it could not
// connect).
int SlowClient(int port, bool half_sent) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    ::close(fd);
    return -1;
  }
  if (half_sent) {
    const char partial[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (::send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL) < 0) {
      ::close(fd);
      return -1;
    }
  }
  return fd;
}

// 200 clients that connect and stall (half of them mid-request, half
// before a byte) while probes come in: every probe is answered, each by a
// client that gives up after a second, as a liveness probe would.
TEST_F(MetricsHttpServerTest, ProbesAreAnsweredWhile200ClientsStall) {
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MetricsHttpServer> server,
      MetricsHttpServer::Start({.host = "127.0.0.1", .port = 0}, &registry_));
  std::vector<int> stalled;
  for (int i = 0; i < 200; ++i) {
    const int fd = SlowClient(server->port(), i % 2 == 0);
    ASSERT_GE(fd, 0) << "client " << i << ": " << std::strerror(errno);
    stalled.push_back(fd);
  }
  httplib::Client probe("127.0.0.1", server->port());
  probe.set_connection_timeout(1, 0);
  probe.set_read_timeout(1, 0);
  probe.set_write_timeout(1, 0);
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/healthz"}) {
    httplib::Result result = probe.Get(path);
    ASSERT_TRUE(result) << path << ": " << httplib::to_string(result.error());
    EXPECT_EQ(result->status, 200) << path;
  }
  for (int fd : stalled) ::close(fd);
}

}  // namespace
}  // namespace metrics
}  // namespace starling
