#include "server/coordinator/test_binaries.h"

#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/base/logging.h"

namespace starling {
namespace coordinator {
namespace {

std::string ShellQuote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// Binds 127.0.0.1:0; returns the fd and sets *port.
ScopedFd BindLoopback(int* port) {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  STARLING_CHECK(fd.valid());
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  STARLING_CHECK(
      ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  STARLING_CHECK(
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

std::string RunfilePath(const std::string& target) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "starling", "/",
                      target);
}

RunResult RunBinary(const std::vector<std::string>& argv, int timeout_seconds) {
  std::string command = absl::StrCat("timeout ", timeout_seconds);
  for (const std::string& arg : argv) {
    absl::StrAppend(&command, " ", ShellQuote(arg));
  }
  absl::StrAppend(&command, " 2>&1");
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  STARLING_CHECK(pipe != nullptr) << command;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

int PickFreePort() {
  int port = 0;
  BindLoopback(&port);  // closed at once: the port is free again
  return port;
}

OccupiedPort::OccupiedPort() {
  fd_ = BindLoopback(&port_);
  STARLING_CHECK(::listen(fd_.get(), 1) == 0);
}

int CountLines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  if (!text.empty() && text.back() != '\n') ++lines;
  return lines;
}

}  // namespace coordinator
}  // namespace starling
