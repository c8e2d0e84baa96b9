#include "server/metrics/metrics_http_server.h"

#include <sys/socket.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "server/metrics/text_format.h"

namespace starling {
namespace metrics {
namespace {

// The pool that serves connections, and how long a connection may take to
// send its request.
constexpr size_t kThreads = 256;
constexpr absl::Duration kRequestWait = absl::Milliseconds(200);
// Connections the kernel holds for the listener to accept. cpp-httplib
// listens with a backlog of 5: a burst of connections (scrapers and probes
// at once, or many clients) overflowed it, the kernel dropped SYNs, and
// each dropped client waited a SYN retransmission (1 s, then 3 s, ...).
constexpr int kBacklog = 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpServerOptions& options, const MetricsRegistry* registry,
    ReadinessCheck readiness) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside 0..65535"));
  }
  auto server = std::make_unique<httplib::Server>();
  // Slow, idle or half-sent connections must not take the probes down:
  // each holds one of the pool's threads only until its request is late
  // (a scraper sends it at once), its reader stalls, or it stays silent or
  // idles kept alive for a second (cpp-httplib's keep-alive wait, whole
  // seconds, covers a connection's first request too); with a thread for
  // each of a couple of hundred such at a time, a probe is answered at once
  // (metrics_http_server_test).
  server->new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server->set_read_timeout(0, absl::ToInt64Microseconds(kRequestWait));
  server->set_write_timeout(1, 0);
  server->set_keep_alive_timeout(1);
  server->set_keep_alive_max_count(16);
  // cpp-httplib's default socket options add SO_REUSEPORT, which lets a
  // second process bind the same port silently and share its scrapes. Keep
  // only SO_REUSEADDR (restart while old connections sit in TIME_WAIT).
  // The socket it is given is the one that listens once bound (kBacklog).
  auto listening = std::make_shared<socket_t>(INVALID_SOCKET);
  server->set_socket_options([listening](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listening = sock;
  });
  server->Get("/metrics",
              [registry](const httplib::Request&, httplib::Response& response) {
                response.set_content(EncodeTextFormat(registry->Collect()),
                                     kTextFormatContentType);
              });
  server->Get("/healthz",
              [](const httplib::Request&, httplib::Response& response) {
                response.set_content("ok\n", "text/plain");
              });
  server->Get(
      "/readyz", [readiness = std::move(readiness)](
                     const httplib::Request&, httplib::Response& response) {
        const absl::Status ready = readiness ? readiness() : absl::OkStatus();
        if (ready.ok()) {
          response.set_content("ready\n", "text/plain");
          return;
        }
        response.status = 503;
        response.set_content(absl::StrCat("not ready: ", ready.message(), "\n"),
                             "text/plain");
      });
  server->Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("Starling: /metrics (Prometheus), /healthz, /readyz\n",
                         "text/plain");
  });
  int port = options.port;
  bool bound;
  if (port == 0) {
    port = server->bind_to_any_port(options.host);
    bound = port > 0;
  } else {
    bound = server->bind_to_port(options.host, port);
  }
  // Listening again sets the backlog (cpp-httplib's is fixed at 5).
  if (bound && *listening != INVALID_SOCKET) ::listen(*listening, kBacklog);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve /metrics on ", options.host, ":", options.port,
        ": bind failed (port already in use, or address not on this host)"));
  }
  std::unique_ptr<MetricsHttpServer> self(
      new MetricsHttpServer(options.host, port, std::move(server)));
  MetricsHttpServer* raw = self.get();
  self->listener_ = std::thread([raw] {
    raw->server_->listen_after_bind();
    raw->listener_done_.Notify();
  });
  return self;
}

MetricsHttpServer::MetricsHttpServer(std::string host, int port,
                                     std::unique_ptr<httplib::Server> server)
    : host_(std::move(host)), port_(port), server_(std::move(server)) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

std::string MetricsHttpServer::address() const {
  return absl::StrCat(host_, ":", port_);
}

void MetricsHttpServer::Stop() {
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  // httplib's stop() only acts once the listener loop has marked itself
  // running; a Stop() that races the thread's start would be lost, so it is
  // repeated until the loop has returned.
  do {
    server_->stop();
  } while (
      !listener_done_.WaitForNotificationWithTimeout(absl::Milliseconds(10)));
  if (listener_.joinable()) listener_.join();
}

}  // namespace metrics
}  // namespace starling
