// MetricsHttpServer: serves a MetricsRegistry in the Prometheus text format
// at GET /metrics over HTTP (cpp-httplib), on its own port, beside the two
// probes service managers and load balancers ask:
//   GET /healthz  200 "ok": the process is up and serving (liveness);
//   GET /readyz   200 "ready" once options.readiness says OK, else 503
//                 "not ready: <why>" (the ReadinessCheck: a node daemon
//                 that has not joined its group yet, a coordinator still
//                 starting).
//
//   STARLING_ASSIGN_OR_RETURN(
//       std::unique_ptr<metrics::MetricsHttpServer> server,
//       metrics::MetricsHttpServer::Start({.host = "0.0.0.0", .port = 9464},
//                                         &registry));
//   ...
//   server->Stop();   // or let it go out of scope
//
// Threads: one listener thread (backlog 1024) plus a pool of 256
// (cpp-httplib's), which encode the registry per request. A connection
// holds a pool thread only while it is prompt: a request must arrive
// within 200 ms once the connection has spoken, a connection that says
// nothing (or idles kept alive) goes after 1 s, and a reply must be taken
// within 1 s; so a couple of hundred slow or idle clients at once each
// hold a thread of their own while the probes get theirs.
// Thread-safe.
#ifndef STARLING_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define STARLING_SERVER_METRICS_METRICS_HTTP_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/metrics/metrics_registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace starling {
namespace metrics {

struct MetricsHttpServerOptions {
  // Address to bind: an IP or a host name ("0.0.0.0" = every interface).
  std::string host = "0.0.0.0";
  // TCP port; 0 picks a free one (see port()).
  int port = 0;
};

// Asked by every GET /readyz (on the server's threads: thread-safe, quick,
// non-blocking): OK when ready, else why not. Null: always ready.
using ReadinessCheck = std::function<absl::Status()>;

class MetricsHttpServer {
 public:
  // Binds and starts serving. `registry` is borrowed and must outlive the
  // server. Errors: InvalidArgument for a port outside 0..65535;
  // Unavailable when the address cannot be bound (port in use, address not
  // local), naming host and port.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpServerOptions& options, const MetricsRegistry* registry,
      ReadinessCheck readiness = nullptr);

  // Stops serving (see Stop()).
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  // "host:port" as bound.
  std::string address() const;

  // Closes the listening socket and waits for the listener thread to end.
  // Idempotent.
  void Stop();

 private:
  MetricsHttpServer(std::string host, int port,
                    std::unique_ptr<httplib::Server> server);

  const std::string host_;
  const int port_;
  const std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  // Notified when the listener thread's loop has returned.
  absl::Notification listener_done_;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace metrics
}  // namespace starling

#endif  // STARLING_SERVER_METRICS_METRICS_HTTP_SERVER_H_
