// EtcdTestServer: a single-member etcd cluster (Debian's /usr/bin/etcd,
// package etcd-server) on loopback for tests of the coordinator's etcd
// store: free ports, its data in a fresh folder under TEST_TMPDIR, started
// with fork/exec and waited for until it answers /health (at most 30 s).
// The destructor SIGKILLs and reaps it (only the process it started).
// Testonly; thread-compatible.
#ifndef STARLING_SERVER_COORDINATOR_ETCD_TEST_SERVER_H_
#define STARLING_SERVER_COORDINATOR_ETCD_TEST_SERVER_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace starling {
namespace coordinator {

class EtcdTestServer {
 public:
  EtcdTestServer() = default;
  ~EtcdTestServer();
  EtcdTestServer(const EtcdTestServer&) = delete;
  EtcdTestServer& operator=(const EtcdTestServer&) = delete;

  // Starts it (again after Stop, on the same data and ports); an error
  // naming what failed, with etcd's log, when it does not answer in time.
  absl::Status Start();
  // SIGKILLs it and waits for it.
  void Stop();

  // "http://127.0.0.1:PORT": its client URL.
  std::string client_url() const;
  // Puts `value` under `key` as any etcd client would (a damaged record, an
  // operator's mistake); an error with etcd's answer otherwise.
  absl::Status Put(const std::string& key, const std::string& value) const;
  // What etcd wrote to stderr so far.
  std::string Log() const;

 private:
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace coordinator
}  // namespace starling

#endif  // STARLING_SERVER_COORDINATOR_ETCD_TEST_SERVER_H_
