#include "server/base/grpc_server.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace starling {
namespace {

constexpr size_t kMaxPemBytes = 1 << 20;

// The PEM text of `path` (given by `flag`).
absl::StatusOr<std::string> ReadPem(absl::string_view flag,
                                    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path,
                     ": cannot be read (no such file, or "
                     "no permission)"));
  }
  std::string text(kMaxPemBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, "=", path, ": more than 1 MiB, not a PEM file (wrong path?)"));
  }
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", path,
                     ": not a PEM file (no '-----BEGIN ' line; a "
                     "certificate or key in PEM form is expected)"));
  }
  return text;
}

struct Pems {
  std::string cert;
  std::string key;
  std::string ca;
};

absl::StatusOr<Pems> ReadPems(const TlsFiles& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert_file and --tls_key_file go together: give both (this "
        "side's certificate and its key) or neither");
  }
  Pems pems;
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem("--tls_cert_file", tls.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("--tls_key_file", tls.key_file);
    if (!key.ok()) return key.status();
    pems.cert = *std::move(cert);
    pems.key = *std::move(key);
  }
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("--tls_ca_file", tls.ca_file);
    if (!ca.ok()) return ca.status();
    pems.ca = *std::move(ca);
  }
  return pems;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (tls.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS server needs --tls_cert_file and --tls_key_file (its "
        "certificate and key); --tls_ca_file alone only verifies clients");
  }
  absl::StatusOr<Pems> pems = ReadPems(tls);
  if (!pems.ok()) return pems.status();
  grpc::SslServerCredentialsOptions options(
      pems->ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = pems->ca;
  options.pem_key_cert_pairs.push_back({pems->key, pems->cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "a TLS client needs --tls_ca_file: the CA that signed the server's "
        "certificate, which it verifies");
  }
  absl::StatusOr<Pems> pems = ReadPems(tls);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pems->ca;
  options.pem_private_key = pems->key;
  options.pem_cert_chain = pems->cert;
  return grpc::SslCredentials(options);
}

absl::Status SignContext(grpc::ClientContext* context, absl::string_view secret,
                         CallRole role, absl::string_view method,
                         absl::string_view scope, const CallIdentity& caller) {
  context->AddMetadata(kCallerHostKey, caller.host);
  if (!caller.address.empty()) {
    context->AddMetadata(kCallerAddressKey, caller.address);
  }
  if (secret.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> credential =
      SignCall(secret, role, method, scope, caller, absl::Now());
  if (!credential.ok()) return credential.status();
  context->AddMetadata(kCallCredentialKey, *credential);
  return absl::OkStatus();
}

std::string CallMetadata(const grpc::ServerContext& context,
                         absl::string_view key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

absl::StatusOr<std::unique_ptr<grpc::Server>> ServeGrpc(
    const std::string& address, grpc::Service* service, absl::string_view flag,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int bound_port = 0;
  builder.AddListeningPort(
      address,
      credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
      &bound_port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", address, " (", flag, ")"));
  }
  return server;
}

}  // namespace starling
