// The gRPC server every Starling service runs on (the coordinator on
// --listen, a node's NodeAdmin on --admin_port): one service on one
// address, with SO_REUSEPORT off, since gRPC sets it by default and a
// second process would then share the port silently; and the channel
// credentials of those who call them (nodes, starlingctl). Both in the
// clear or over TLS from PEM files (--tls_cert_file, --tls_key_file,
// --tls_ca_file): a server with a CA file asks every client for a
// certificate that CA signed (mutual TLS); a client verifies the server's
// certificate against the CA and shows its own when it has one.
#ifndef STARLING_SERVER_BASE_GRPC_SERVER_H_
#define STARLING_SERVER_BASE_GRPC_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/base/call_credential.h"

namespace starling {

// PEM files of one side of a TLS connection. All empty: no TLS.
struct TlsFiles {
  std::string cert_file;  // this side's certificate (chain)
  std::string key_file;   // its private key
  std::string ca_file;    // the CA that signs the other side's certificates
  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !ca_file.empty();
  }
};

// Credentials for a server: insecure without TLS files; with them TLS,
// which needs cert_file and key_file, and with ca_file requires and
// verifies client certificates. InvalidArgument naming the flag
// (--tls_cert_file, ...) for a file missing, unreadable, over 1 MiB or not
// PEM, or a key without a certificate.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsFiles& tls);

// Credentials for a channel: insecure without TLS files; with them TLS,
// which needs ca_file (the server's certificate is verified against it,
// and must name the host dialled: a DNS name or IP address in its
// subjectAltName) and sends cert_file and key_file (both or neither) as
// the client's certificate. Errors as ServerCredentialsFor's.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsFiles& tls);

// Puts who `caller` is into `context`'s metadata (its host; its address
// when it has one) and, with a `secret`, a fresh credential of `role` for
// `method` and `scope` (server/base/call_credential.h). Internal if the
// random generator fails.
absl::Status SignContext(grpc::ClientContext* context, absl::string_view secret,
                         CallRole role, absl::string_view method,
                         absl::string_view scope, const CallIdentity& caller);

// One metadata value the client sent with the call ("" if none).
std::string CallMetadata(const grpc::ServerContext& context,
                         absl::string_view key);

// Serves `service` (borrowed: it must outlive the server) on `address`
// ("HOST:PORT") with `credentials` (null: insecure). Unavailable "cannot
// serve gRPC on ADDRESS (FLAG)" when the address cannot be bound; `flag`
// names the option that gave it.
absl::StatusOr<std::unique_ptr<grpc::Server>> ServeGrpc(
    const std::string& address, grpc::Service* service, absl::string_view flag,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_GRPC_SERVER_H_
