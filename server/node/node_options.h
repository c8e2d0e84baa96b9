// NodeOptions: everything that configures one node daemon. main.cc fills
// it from flags; tests fill it directly. Plain data.
#ifndef STARLING_SERVER_NODE_NODE_OPTIONS_H_
#define STARLING_SERVER_NODE_NODE_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/base/grpc_server.h"

namespace starling {
namespace node {

struct NodeOptions {
  // Required: the coordinator's gRPC address, "host:port".
  std::string coordinator;
  // Required: the job to join (must match the coordinator's).
  std::string job_id;
  // How this node is named to the coordinator; default: gethostname().
  std::string hostname;
  // Data-plane (TCP transport) host and port this daemon listens on; peers
  // connect there, so the host must be reachable from them.
  std::string data_host = "127.0.0.1";
  int data_port = 29500;
  // Admin gRPC service (NodeAdmin) port on data_host; 0 turns it off.
  int admin_port = 29600;
  // Unix socket local workers connect to. Required.
  std::string worker_socket;
  // Workers that attach to this daemon; every round waits for all of them.
  int local_workers = 1;
  // Bound on joining: reaching the coordinator, the group forming, and the
  // data-plane mesh connecting.
  absl::Duration join_timeout = absl::Seconds(60);
  // How long a worker that left a running run without finishing holds the
  // run's rounds, waiting for a worker with the same index to take its
  // place; past it the run fails on every rank naming the worker.
  absl::Duration worker_grace = absl::Seconds(60);
  // The cluster secret's bytes (read from --cluster_secret_file by main):
  // peers authenticate with it before any data moves. Empty: only loopback
  // peers are accepted, unless `insecure`.
  std::string cluster_secret;
  bool insecure = false;
  // The operator secret (--operator_secret_file): operators' calls to the
  // admin service may be signed under it (or the cluster secret).
  std::string operator_secret;
  // TLS of the control plane: to the coordinator (ca_file verifies it;
  // cert_file and key_file are this node's certificate) and of the admin
  // service (cert_file and key_file; ca_file verifies its clients). Empty:
  // in the clear.
  TlsFiles tls;
  // Host the admin service listens on (and is advertised at); empty:
  // data_host.
  std::string admin_host;
  // The network link rate the operator states for this node, in Gbit/s
  // (exported as starling_node_link_rate_bytes_per_second for dashboards to
  // hold bus bandwidth against); 0: not stated.
  double link_gbits = 0;
  // How the writes to each peer daemon travel (--transport): "auto" (shared
  // memory with the daemons of this host, the fabric with every other peer
  // whose end has a usable provider, TCP with the rest), "tcp", "fabric"
  // (every peer over the fabric, or the group fails to form naming what is
  // missing) or "shm" (every peer through shared memory: all on this
  // host).
  std::string transport = "auto";
  // libfabric providers to try, in order (--fabric_provider); empty: verbs,
  // then efa.
  std::vector<std::string> fabric_providers;
  // Follow verbs' registration rules on any provider (--fabric_verbs_style).
  bool fabric_verbs_style = false;
  // How long a collective step polls for a peer's write before it sleeps
  // (--wait_spin; TcpOptions::wait_spin): longer spends CPU to spare
  // wake-ups on small messages. Zero: never poll.
  absl::Duration wait_spin = absl::Microseconds(50);
  // How long the data plane's I/O thread polls its sockets after handling
  // events before it sleeps (--loop_spin; TcpOptions::loop_spin): with
  // wait_spin, a small all-reduce's frames are read and seen with no thread
  // woken (tests/bench/RESULTS.md run 10). Zero: sleep at once.
  absl::Duration loop_spin = absl::Microseconds(200);
  // SO_SNDBUF of the data plane's TCP sockets (--tcp_send_buffer_bytes;
  // TcpOptions::socket_send_buffer_bytes, which says why it is capped); 0
  // leaves it to the kernel's autotuning.
  int tcp_send_buffer_bytes = 256 * 1024;
};

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_NODE_OPTIONS_H_
