// MetricsHttpServer: serves a MetricsRegistry in the Prometheus text format
// at GET /metrics over HTTP (cpp-httplib), on its own port.
//
//   STARLING_ASSIGN_OR_RETURN(
//       std::unique_ptr<metrics::MetricsHttpServer> server,
//       metrics::MetricsHttpServer::Start({.host = "0.0.0.0", .port = 9464},
//                                         &registry));
//   ...
//   server->Stop();   // or let it go out of scope
//
// Threads: one listener thread plus cpp-httplib's worker pool, which
// encode the registry per request. Thread-safe.
#ifndef STARLING_SERVER_METRICS_METRICS_HTTP_SERVER_H_
#define STARLING_SERVER_METRICS_METRICS_HTTP_SERVER_H_

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

class MetricsHttpServer {
 public:
  // Binds and starts serving. `registry` is borrowed and must outlive the
  // server. Errors: InvalidArgument for a port outside 0..65535;
  // Unavailable when the address cannot be bound (port in use, address not
  // local), naming host and port.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpServerOptions& options, const MetricsRegistry* registry);

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
