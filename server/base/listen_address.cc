#include "server/base/listen_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/base/scoped_fd.h"

namespace starling {
namespace {

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '-' || c == '_';
}

bool IsV6Char(char c) {
  return absl::ascii_isxdigit(static_cast<unsigned char>(c)) || c == ':' ||
         c == '.' || c == '%';
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "' is not host:port (e.g. 0.0.0.0:29400)"));
  }
  HostPort out;
  absl::string_view host = address.substr(0, colon);
  const bool bracketed =
      host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  bool host_ok = !host.empty();
  for (char c : host)
    host_ok = host_ok && (bracketed ? IsV6Char(c) : IsHostChar(c));
  if (!host_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address,
        "' has no valid host before the last ':' "
        "(a host name, an IPv4 address or a bracketed IPv6 address)"));
  }
  out.host = std::string(host);
  if (!absl::SimpleAtoi(address.substr(colon + 1), &out.port) || out.port < 0 ||
      out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address '", address, "' has no port in 0..65535 after the last ':'"));
  }
  return out;
}

absl::Status CheckCanListen(const HostPort& address) {
  const std::string where = absl::StrCat(address.host, ":", address.port);
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* results = nullptr;
  const std::string port = absl::StrCat(address.port);
  const int rc =
      ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &results);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", where, ": ", ::gai_strerror(rc)));
  }
  int error = 0;
  for (addrinfo* ai = results; ai != nullptr; ai = ai->ai_next) {
    const ScopedFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
                               ai->ai_protocol));
    if (!fd.valid()) {
      error = errno;
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    const bool bound = ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0;
    error = bound ? 0 : errno;
    if (bound) break;
  }
  ::freeaddrinfo(results);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", where, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

bool IsLoopbackHost(absl::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  const std::string text(host);
  in_addr v4;
  if (::inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  return ::inet_pton(AF_INET6, text.c_str(), &v6) == 1 &&
         IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace starling
