// starling-bench: measures Starling's collectives between processes, one
// rank per process, and prints an nccl-tests-style table.
//
//   starling-bench --local 4 --sizes 1e3,1e6,1e7 --check
//   starling-bench --rank 1 --peers 10.77.0.1,10.77.0.2 --port 29500 ...
//
// See --help for every flag. Each timed iteration starts with a barrier; the
// reported time of an iteration is that of the slowest rank (as in
// ../shared/peerbench), the median is over iterations.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/base/command_line.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/base/version.h"
#include "server/bench/bench_runner.h"
#include "server/transport/peer_address.h"

ABSL_FLAG(int, local, 0,
          "fork this many ranks on 127.0.0.1 (ports --port + rank) and run "
          "them all; overrides --rank/--peers");
ABSL_FLAG(int, rank, -1, "this process's rank (with --peers)");
ABSL_FLAG(std::string, peers, "",
          "comma-separated host or host:port of every rank, index = rank; a "
          "bare host listens on --port + its rank");
ABSL_FLAG(int, world, 0, "number of ranks; if given, must match --peers");
ABSL_FLAG(int, port, 29500, "base port for bare hosts and --local");
ABSL_FLAG(std::string, op, "allreduce",
          "allreduce, reduce_scatter, allgather or broadcast");
ABSL_FLAG(std::string, algo, "auto",
          "comma-separated: auto, butterfly, ring, tree, reduce_bcast, or all");
ABSL_FLAG(std::string, dtype, "float32",
          "float32, float64, float16, bfloat16, int32 or int64");
ABSL_FLAG(std::string, reduce, "sum", "sum, min, max, average or product");
ABSL_FLAG(std::string, sizes, "1e3,1e4,1e5,1e6,1e7",
          "comma-separated element counts (1e6 or 1000000)");
ABSL_FLAG(int, iters, 0,
          "timed iterations per case; 0 picks by size (100 for <=1e4 down to "
          "3 for >=1e8)");
ABSL_FLAG(int, warmup, -1, "warm-up iterations per case; -1 picks by size");
ABSL_FLAG(double, timeout_s, 30, "per-collective timeout in seconds");
ABSL_FLAG(double, max_seconds, 60,
          "time budget per case: all ranks stop after the iteration that "
          "crosses it");
ABSL_FLAG(bool, check, false,
          "compare every result with the fp64 reference; exit 1 on any "
          "mismatch");
ABSL_FLAG(bool, csv, false, "print CSV instead of the table");
ABSL_FLAG(bool, peerbench, false,
          "rank 0 also prints the PEERBENCH line that "
          "../shared/peerbench/run.sh reads");
ABSL_FLAG(double, link_gbps, 0,
          "link rate in Gbit/s; adds the ratio to the bandwidth bound");
ABSL_FLAG(int, root, 0, "root rank for broadcast");
ABSL_FLAG(int, sockets_per_peer, 1, "TCP sockets per peer (striping)");
ABSL_FLAG(int64_t, chunk_bytes, 0, "pipelining chunk size; 0 = default");
ABSL_FLAG(bool, insecure, false,
          "accept unauthenticated peers from any address (a benchmark "
          "cluster on a trusted network); without it only loopback peers");
ABSL_FLAG(int, socket_buffer_bytes, -1,
          "SO_SNDBUF and SO_RCVBUF of the TCP sockets; 0 leaves both to the "
          "kernel's autotuning; -1: the transport's defaults (send buffer "
          "256 KiB, receive buffer autotuned)");
ABSL_FLAG(int64_t, wait_spin_us, -1,
          "microseconds a rank polls for an incoming write before sleeping "
          "(-1: the transport's default)");
ABSL_FLAG(int64_t, loop_spin_us, -1,
          "microseconds a rank's TCP I/O thread polls its sockets after "
          "handling events before it sleeps (-1: the transport's default)");
ABSL_FLAG(std::string, transport, "tcp",
          "tcp; fabric: writes between ranks as one-sided libfabric writes "
          "(--fabric_provider), the run failing if a rank cannot open it; "
          "shm: writes through shared-memory rings, every rank on this "
          "host (the run fails if a peer is elsewhere)");
ABSL_FLAG(std::string, fabric_provider, "verbs",
          "libfabric provider with --transport=fabric: verbs, efa, or tcp");
ABSL_FLAG(int64_t, fabric_spin_us, 0,
          "microseconds the fabric path's progress thread polls its "
          "completion queue before it blocks (0: block at once)");
ABSL_FLAG(bool, fabric_verbs_style, false,
          "follow verbs' registration rules on any provider");
ABSL_FLAG(bool, print_iterations, false,
          "rank 0 prints the slowest rank's time of every timed iteration");
ABSL_FLAG(std::string, log_level, "warning", "debug, info, warning or error");

namespace starling {
namespace bench {
namespace {

absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text) {
  std::vector<uint64_t> sizes;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(s, &v) || v < 0 || v > 1e12) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sizes: '", s, "' is not an element count"));
    }
    sizes.push_back(static_cast<uint64_t>(v + 0.5));
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return sizes;
}

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig c;
  STARLING_ASSIGN_OR_RETURN(c.op, ParseOp(absl::GetFlag(FLAGS_op)));
  STARLING_ASSIGN_OR_RETURN(c.algorithms,
                            ParseAlgorithmList(absl::GetFlag(FLAGS_algo)));
  STARLING_ASSIGN_OR_RETURN(
      c.dtype, collective::ParseDataType(absl::GetFlag(FLAGS_dtype)));
  STARLING_ASSIGN_OR_RETURN(
      c.reduce, collective::ParseReduceOp(absl::GetFlag(FLAGS_reduce)));
  STARLING_ASSIGN_OR_RETURN(c.sizes, ParseSizes(absl::GetFlag(FLAGS_sizes)));
  c.iters = absl::GetFlag(FLAGS_iters);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  c.max_case_time = absl::Seconds(absl::GetFlag(FLAGS_max_seconds));
  c.check = absl::GetFlag(FLAGS_check);
  c.csv = absl::GetFlag(FLAGS_csv);
  c.peerbench = absl::GetFlag(FLAGS_peerbench);
  c.link_bytes_per_s = absl::GetFlag(FLAGS_link_gbps) * 1e9 / 8;
  c.root = absl::GetFlag(FLAGS_root);
  c.sockets_per_peer = absl::GetFlag(FLAGS_sockets_per_peer);
  c.chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  c.print_iterations = absl::GetFlag(FLAGS_print_iterations);
  c.socket_buffer_bytes = absl::GetFlag(FLAGS_socket_buffer_bytes);
  c.insecure = absl::GetFlag(FLAGS_insecure);
  c.wait_spin_us = absl::GetFlag(FLAGS_wait_spin_us);
  c.loop_spin_us = absl::GetFlag(FLAGS_loop_spin_us);
  c.transport = absl::GetFlag(FLAGS_transport);
  c.fabric_provider = absl::GetFlag(FLAGS_fabric_provider);
  c.fabric_verbs_style = absl::GetFlag(FLAGS_fabric_verbs_style);
  c.fabric_spin_us = absl::GetFlag(FLAGS_fabric_spin_us);
  if (c.fabric_spin_us < 0) {
    return absl::InvalidArgumentError("--fabric_spin_us must be >= 0");
  }
  if (c.transport != "tcp" && c.transport != "fabric" && c.transport != "shm") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--transport=", c.transport, " is not one of tcp, fabric, shm"));
  }
  if (c.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout_s must be positive");
  }
  if (c.sockets_per_peer < 1) {
    return absl::InvalidArgumentError("--sockets_per_peer must be >= 1");
  }
  return c;
}

// Lets every flag be spelled with dashes (--timeout-s) as well as
// underscores (--timeout_s): Abseil flag names cannot hold dashes.
void NormalizeFlagNames(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (arg[0] != '-' || arg[1] != '-') continue;
    if (arg[2] == '\0') break;  // "--" ends the flags
    for (char* p = arg + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

// Forks `n` ranks on loopback; returns the number that failed.
int RunLocal(const BenchConfig& config, int n) {
  const int base = absl::GetFlag(FLAGS_port);
  std::string list;
  for (int r = 0; r < n; ++r) {
    absl::StrAppend(&list, r == 0 ? "" : ",", "127.0.0.1:", base + r);
  }
  auto peers = transport::ParsePeerList(list, base);
  if (!peers.ok()) {
    std::fprintf(stderr, "starling-bench: %s\n",
                 std::string(peers.status().message()).c_str());
    return n;
  }
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const absl::Status s = RunRank(config, r, *peers);
      if (!s.ok()) {
        std::fprintf(stderr, "starling-bench: rank %d: %s\n", r,
                     std::string(s.message()).c_str());
      }
      std::fflush(stdout);
      _exit(s.ok() ? 0 : 1);
    }
    if (pid < 0) {
      std::perror("starling-bench: fork");
      break;
    }
    children.push_back(pid);
  }
  int failed = n - static_cast<int>(children.size());
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  return failed;
}

}  // namespace
}  // namespace bench
}  // namespace starling

int main(int argc, char** argv) {
  starling::bench::NormalizeFlagNames(argc, argv);
  // --help lists this file's flags (Abseil's default filter matches none:
  // the file is not named after the binary).
  starling::ParseProgramCommandLine(
      {"starling-bench", "server/bench/starling_bench_main.cc",
       starling::kStarlingVersion,
       "Measures Starling's collectives, one rank per process.\n"
       "  starling-bench --local 4 --sizes 1e3,1e6 --check\n"
       "  starling-bench --rank R --peers H0,H1,... [--port P] ..."},
      argc, argv);
  starling::LogSeverity level;
  if (absl::Status s =
          starling::ParseLogSeverity(absl::GetFlag(FLAGS_log_level), &level);
      !s.ok()) {
    std::fprintf(stderr, "starling-bench: --log_level: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  starling::SetMinLogSeverity(level);
  auto config = starling::bench::ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "starling-bench: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  const int local = absl::GetFlag(FLAGS_local);
  if (local > 0) {
    const int failed = starling::bench::RunLocal(*config, local);
    if (failed > 0) {
      std::fprintf(stderr, "starling-bench: %d of %d ranks failed\n", failed,
                   local);
    }
    return failed == 0 ? 0 : 1;
  }
  const int rank = absl::GetFlag(FLAGS_rank);
  auto peers = starling::transport::ParsePeerList(absl::GetFlag(FLAGS_peers),
                                                  absl::GetFlag(FLAGS_port));
  if (!peers.ok()) {
    std::fprintf(stderr, "starling-bench: --peers: %s\n",
                 std::string(peers.status().message()).c_str());
    return 2;
  }
  const int world = absl::GetFlag(FLAGS_world);
  if (world > 0 && world != static_cast<int>(peers->size())) {
    std::fprintf(stderr, "starling-bench: --world %d but --peers lists %zu\n",
                 world, peers->size());
    return 2;
  }
  if (rank < 0 || rank >= static_cast<int>(peers->size())) {
    std::fprintf(stderr,
                 "starling-bench: --rank %d is not in 0..%zu (give --rank "
                 "with --peers, or --local N)\n",
                 rank, peers->size() - 1);
    return 2;
  }
  const absl::Status s = starling::bench::RunRank(*config, rank, *peers);
  if (!s.ok()) {
    std::fprintf(stderr, "starling-bench: rank %d: %s\n", rank,
                 std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
