// Network addresses given on command lines ("host:port", "[v6]:port"):
// parsing with a host check, and a bind probe so that a main.cc can say in
// one line that a port is taken before gRPC or cpp-httplib try (and log
// their own multi-line complaints). Used by the coordinator (--listen), the
// node daemon (its ports, --coordinator). Stateless functions; thread-safe.
#ifndef STARLING_SERVER_BASE_LISTEN_ADDRESS_H_
#define STARLING_SERVER_BASE_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {

struct HostPort {
  // Without brackets: "0.0.0.0", "::", "node7".
  std::string host;
  int port = 0;
};

// "host:port" or "[v6]:port" with port 0..65535 and a host made of
// letters, digits, '.', '-' and '_' (or an IPv6 literal in brackets).
// InvalidArgument quoting `address` otherwise.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);

// Binds (with SO_REUSEADDR, as gRPC and cpp-httplib do) and releases a TCP
// socket at `address`. OK if a server could listen there now; Unavailable
// naming the address and the system's reason (e.g. "Address already in
// use") otherwise; InvalidArgument if the host does not resolve.
absl::Status CheckCanListen(const HostPort& address);

// Whether `host` can be reached only from this machine: "localhost", an
// IPv4 address in 127.0.0.0/8, or ::1 (bracketed or not).
bool IsLoopbackHost(absl::string_view host);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_LISTEN_ADDRESS_H_
