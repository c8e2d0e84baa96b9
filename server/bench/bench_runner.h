// One rank of starling-bench: opens the TCP transport to its peers, runs
// every (size, algorithm) case of a BenchConfig, and on rank 0 prints each
// result as soon as it is known (the table doubles as progress).
#ifndef STARLING_SERVER_BENCH_BENCH_RUNNER_H_
#define STARLING_SERVER_BENCH_BENCH_RUNNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/bench/bench_report.h"
#include "server/collective/data_type.h"
#include "server/collective/op_descriptor.h"
#include "server/transport/peer_address.h"

namespace starling {
namespace bench {

struct BenchConfig {
  Op op = Op::kAllReduce;
  std::vector<collective::Algorithm> algorithms = {
      collective::Algorithm::kAuto};
  collective::DataType dtype = collective::DataType::kFloat32;
  collective::ReduceOp reduce = collective::ReduceOp::kSum;
  std::vector<uint64_t> sizes;  // elements
  int iters = 0;                // 0: by size
  int warmup = -1;              // -1: by size
  absl::Duration timeout = absl::Seconds(30);
  absl::Duration max_case_time = absl::Seconds(60);
  bool check = false;
  bool csv = false;
  bool peerbench = false;
  double link_bytes_per_s = 0;
  int root = 0;
  int sockets_per_peer = 1;
  int64_t chunk_bytes = 0;  // 0: the communicator's default
  // SO_SNDBUF/SO_RCVBUF; 0: kernel autotuning; -1: the transport's defaults
  int socket_buffer_bytes = -1;
  // Accept unauthenticated peers from any address (no cluster secret);
  // otherwise only loopback peers are accepted.
  bool insecure = false;
  int64_t wait_spin_us = -1;  // transport poll before sleeping; -1: default
  int64_t loop_spin_us = -1;  // I/O thread's poll before sleeping; -1: default
  // "tcp", or "fabric": every peer's writes over libfabric's
  // `fabric_provider` (the group fails to form if it cannot).
  std::string transport = "tcp";
  std::string fabric_provider = "verbs";
  bool fabric_verbs_style = false;
  int64_t fabric_spin_us = 0;  // the fabric path's poll before it blocks
  std::string fabric_host;  // the endpoint's address; empty: this rank's host
  bool print_iterations = false;  // rank 0 prints every iteration's time
};

// "auto", "butterfly", "ring", "tree", "reduce_bcast" (or
// "reduce-broadcast"), comma-separated, or "all" (the four algorithms).
absl::StatusOr<std::vector<collective::Algorithm>> ParseAlgorithmList(
    absl::string_view text);

// The name the benchmark prints: as AlgorithmName(), but "reduce_bcast" for
// the baseline, as ../shared/peerbench names Open MPI's.
std::string BenchAlgorithmName(collective::Algorithm algorithm);

// Iteration counts by size, as ../shared/peerbench/run.sh picks them:
// <=1e4: 10+100, <=1e5: 5+50, <=1e6: 3+20, <=1e7: 2+8, larger: 1+3.
void DefaultIterations(uint64_t elements, int* warmup, int* iters);

// Runs every case as `rank` of `peers`. Fails on a transport or collective
// error, or (with --check) when any rank saw a wrong element.
absl::Status RunRank(const BenchConfig& config, int rank,
                     const std::vector<transport::PeerAddress>& peers);

}  // namespace bench
}  // namespace starling

#endif  // STARLING_SERVER_BENCH_BENCH_RUNNER_H_
