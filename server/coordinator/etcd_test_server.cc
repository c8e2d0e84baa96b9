#include "server/coordinator/etcd_test_server.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "server/coordinator/test_binaries.h"

namespace starling {
namespace coordinator {
namespace {

constexpr char kEtcd[] = "/usr/bin/etcd";

}  // namespace

EtcdTestServer::~EtcdTestServer() { Stop(); }

std::string EtcdTestServer::client_url() const {
  return absl::StrCat("http://127.0.0.1:", client_port_);
}

absl::Status EtcdTestServer::Put(const std::string& key,
                                 const std::string& value) const {
  httplib::Client client(client_url());
  const httplib::Result put = client.Post(
      "/v3/kv/put",
      absl::StrCat(R"({"key":")", absl::Base64Escape(key), R"(","value":")",
                   absl::Base64Escape(value), R"("})"),
      "application/json");
  if (!put) {
    return absl::UnavailableError(absl::StrCat(
        "etcd at ", client_url(), ": ", httplib::to_string(put.error())));
  }
  if (put->status != 200) {
    return absl::InternalError(absl::StrCat("etcd at ", client_url(),
                                            " answered HTTP ", put->status,
                                            ": ", put->body));
  }
  return absl::OkStatus();
}

std::string EtcdTestServer::Log() const {
  std::ifstream in(dir_ + "/etcd.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status EtcdTestServer::Start() {
  if (access(kEtcd, X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(kEtcd,
                     " is missing: install etcd-server "
                     "(deploy/setup.sh does)"));
  }
  if (dir_.empty()) {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/etcd.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError("mkdtemp failed for the etcd folder");
    }
    dir_ = pattern;
    client_port_ = PickFreePort();
    peer_port_ = PickFreePort();
  }
  const std::string peer = absl::StrCat("http://127.0.0.1:", peer_port_);
  const std::vector<std::string> args = {
      kEtcd,
      "--name=test",
      absl::StrCat("--data-dir=", dir_, "/data"),
      absl::StrCat("--listen-client-urls=", client_url()),
      absl::StrCat("--advertise-client-urls=", client_url()),
      absl::StrCat("--listen-peer-urls=", peer),
      absl::StrCat("--initial-advertise-peer-urls=", peer),
      absl::StrCat("--initial-cluster=test=", peer),
      // Not exposed: no metrics listener, no profiling.
      "--log-level=warn",
  };
  const std::string log = dir_ + "/etcd.log";
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed for etcd");
  if (pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    execv(kEtcd, argv.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(
          absl::StrCat("etcd exited at its start; its log:\n", Log()));
    }
    httplib::Client client(client_url());
    client.set_connection_timeout(1, 0);
    client.set_read_timeout(1, 0);
    const httplib::Result health = client.Get("/health");
    if (health && health->status == 200 &&
        absl::StrContains(health->body, "true")) {
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  Stop();
  return absl::DeadlineExceededError(absl::StrCat(
      "etcd did not answer /health within 30 s; its log:\n", Log()));
}

void EtcdTestServer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace coordinator
}  // namespace starling
