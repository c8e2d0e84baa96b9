#include "server/bench/bench_runner.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/base/logging.h"
#include "server/base/status_macros.h"
#include "server/bench/bench_input.h"
#include "server/bench/cpu_usage.h"
#include "server/collective/communicator.h"
#include "server/collective/selector.h"
#include "server/transport/fabric/fabric_connect.h"
#include "server/transport/tcp/tcp_transport.h"

namespace starling {
namespace bench {
namespace {

using collective::Algorithm;
using collective::CallOptions;
using collective::Communicator;
using collective::DataType;
using collective::ReduceOp;

collective::OpKind KindOf(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return collective::OpKind::kAllReduce;
    case Op::kReduceScatter:
      return collective::OpKind::kReduceScatter;
    case Op::kAllGather:
      return collective::OpKind::kAllGather;
    case Op::kBroadcast:
      return collective::OpKind::kBroadcast;
  }
  return collective::OpKind::kAllReduce;
}

// The whole vector each rank passes to the op, in bytes.
uint64_t BufferBytes(const BenchConfig& c, uint64_t elements) {
  return elements * collective::DataTypeBytes(c.dtype);
}

absl::Status RunOp(Communicator* comm, const BenchConfig& c,
                   absl::Span<std::byte> data, const CallOptions& options) {
  switch (c.op) {
    case Op::kAllReduce:
      return comm->AllReduce(data, c.dtype, c.reduce, options);
    case Op::kReduceScatter:
      return comm->ReduceScatter(data, c.dtype, c.reduce, options);
    case Op::kAllGather:
      return comm->AllGather(data, c.dtype, options);
    case Op::kBroadcast:
      return comm->Broadcast(data, c.dtype, c.root, options);
  }
  return absl::InternalError("unknown op");
}

// Small all-reduces that carry the benchmark's own bookkeeping.
absl::Status AllReduceDoubles(Communicator* comm, std::vector<double>* values,
                              ReduceOp op, const CallOptions& options) {
  return comm->AllReduce(
      absl::MakeSpan(reinterpret_cast<std::byte*>(values->data()),
                     values->size() * sizeof(double)),
      DataType::kFloat64, op, options);
}

struct CaseOutcome {
  CaseResult result;
  std::string first_wrong;
};

absl::StatusOr<CaseOutcome> RunCase(Communicator* comm, const BenchConfig& c,
                                    uint64_t elements, Algorithm algorithm,
                                    std::vector<std::byte>* buffer) {
  const int rank = comm->rank();
  const int ranks = comm->size();
  int warmup = 0, iters = 0;
  DefaultIterations(elements, &warmup, &iters);
  if (c.warmup >= 0) warmup = c.warmup;
  if (c.iters > 0) iters = c.iters;

  buffer->resize(BufferBytes(c, elements));
  absl::Span<std::byte> data = absl::MakeSpan(*buffer);
  CallOptions options;
  options.algorithm = algorithm;
  options.timeout = c.timeout;
  CallOptions small = options;
  small.algorithm = Algorithm::kAuto;

  for (int i = 0; i < warmup; ++i) {
    FillInput(c.op, c.dtype, data, rank, ranks, c.root);
    STARLING_RETURN_IF_ERROR(Annotate(RunOp(comm, c, data, options),
                                      absl::StrCat("warm-up iteration ", i)));
  }

  CaseOutcome out;
  std::vector<double> times;
  CpuUsage cpu;
  uint64_t wrong = 0;
  const absl::Time case_start = absl::Now();
  for (int i = 0; i < iters; ++i) {
    FillInput(c.op, c.dtype, data, rank, ranks, c.root);
    STARLING_RETURN_IF_ERROR(comm->Barrier(small));
    cpu.Begin();
    const absl::Time start = absl::Now();
    STARLING_RETURN_IF_ERROR(Annotate(RunOp(comm, c, data, options),
                                      absl::StrCat("timed iteration ", i)));
    times.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    cpu.End();
    if (c.check) {
      const CheckOutcome check =
          CheckOutput(c.op, c.dtype, c.reduce, data, rank, ranks, c.root);
      if (check.wrong > 0 && wrong == 0) {
        out.first_wrong =
            absl::StrCat("rank ", rank, ", iteration ", i, ": ", check.wrong,
                         " wrong element(s), ", check.first_wrong);
      }
      wrong += check.wrong;
    }
    // Everyone stops after the iteration in which any rank ran out of budget.
    std::vector<double> over = {
        absl::Now() - case_start > c.max_case_time ? 1.0 : 0.0};
    STARLING_RETURN_IF_ERROR(
        AllReduceDoubles(comm, &over, ReduceOp::kMax, small));
    if (over[0] > 0) break;
  }

  // Per-iteration time of the slowest rank, and whether anyone saw a wrong
  // element.
  std::vector<double> slowest = times;
  STARLING_RETURN_IF_ERROR(
      AllReduceDoubles(comm, &slowest, ReduceOp::kMax, small));
  std::vector<double> wrong_total = {static_cast<double>(wrong)};
  STARLING_RETURN_IF_ERROR(
      AllReduceDoubles(comm, &wrong_total, ReduceOp::kSum, small));
  std::vector<double> cores = {cpu.ProcessCores()};
  STARLING_RETURN_IF_ERROR(
      AllReduceDoubles(comm, &cores, ReduceOp::kMax, small));

  CaseResult& r = out.result;
  r.op = c.op;
  // Auto's rows say what it chose ("auto:ring"), so that they stay apart
  // from the same algorithm asked for by name.
  r.algorithm = BenchAlgorithmName(
      collective::SelectAlgorithm(comm->options().selector, KindOf(c.op),
                                  BufferBytes(c, elements), ranks, algorithm));
  if (algorithm == Algorithm::kAuto) r.algorithm = "auto:" + r.algorithm;
  r.dtype = std::string(collective::DataTypeName(c.dtype));
  r.ranks = ranks;
  r.elements = elements;
  r.bytes = BufferBytes(c, elements);
  r.iterations = static_cast<int>(times.size());
  r.median_s = Median(slowest);
  r.rank0_median_s = Median(times);
  r.min_s = times.empty() ? 0 : *std::min_element(times.begin(), times.end());
  r.cpu_util = cpu.BusyFraction();
  r.rank_cores = cores[0];
  r.link_bytes_per_s = c.link_bytes_per_s;
  r.checked = c.check;
  r.ok = wrong_total[0] == 0;
  if (c.print_iterations && rank == 0) {
    std::string line =
        absl::StrCat("# ", r.algorithm, " ", elements,
                     " elements, slowest rank per iteration (us):");
    for (double t : slowest)
      absl::StrAppend(&line, " ", static_cast<int64_t>(t * 1e6));
    std::printf("%s\n", line.c_str());
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Algorithm>> ParseAlgorithmList(
    absl::string_view text) {
  std::vector<Algorithm> out;
  for (absl::string_view name : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    if (name == "all") {
      for (Algorithm a : {Algorithm::kButterfly, Algorithm::kRing,
                          Algorithm::kTree, Algorithm::kReduceBroadcast}) {
        out.push_back(a);
      }
      continue;
    }
    bool found = false;
    for (Algorithm a :
         {Algorithm::kAuto, Algorithm::kButterfly, Algorithm::kRing,
          Algorithm::kTree, Algorithm::kReduceBroadcast}) {
      if (name == BenchAlgorithmName(a) || name == AlgorithmName(a)) {
        out.push_back(a);
        found = true;
        break;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--algo: unknown algorithm '", name,
          "': expected auto, butterfly, ring, tree, reduce_bcast or all"));
    }
  }
  if (out.empty()) return absl::InvalidArgumentError("--algo is empty");
  return out;
}

std::string BenchAlgorithmName(Algorithm algorithm) {
  if (algorithm == Algorithm::kReduceBroadcast) return "reduce_bcast";
  return std::string(collective::AlgorithmName(algorithm));
}

void DefaultIterations(uint64_t elements, int* warmup, int* iters) {
  if (elements <= 10000) {
    *warmup = 10, *iters = 100;
  } else if (elements <= 100000) {
    *warmup = 5, *iters = 50;
  } else if (elements <= 1000000) {
    *warmup = 3, *iters = 20;
  } else if (elements <= 10000000) {
    *warmup = 2, *iters = 8;
  } else {
    *warmup = 1, *iters = 3;
  }
}

absl::Status RunRank(const BenchConfig& config, int rank,
                     const std::vector<transport::PeerAddress>& peers) {
  transport::tcp::TcpOptions topts;
  topts.rank = rank;
  topts.peers = peers;
  topts.sockets_per_peer = config.sockets_per_peer;
  if (config.socket_buffer_bytes >= 0) {
    topts.socket_send_buffer_bytes = config.socket_buffer_bytes;
    topts.socket_recv_buffer_bytes = config.socket_buffer_bytes;
  }
  topts.insecure = config.insecure;
  if (config.loop_spin_us >= 0) {
    topts.loop_spin = absl::Microseconds(config.loop_spin_us);
  }
  if (config.wait_spin_us >= 0) {
    topts.wait_spin = absl::Microseconds(config.wait_spin_us);
  }
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<transport::tcp::TcpTransport> tcp,
                            transport::tcp::TcpTransport::Create(topts));
  const transport::fabric::PeerPath* fabric = nullptr;
  const transport::shm::ShmPath* shm_path = nullptr;
  if (config.transport != "tcp") {
    transport::fabric::ConnectOptions connect;
    connect.fabric_options.host =
        config.fabric_host.empty() ? peers[rank].host : config.fabric_host;
    connect.fabric_options.verbs_style = config.fabric_verbs_style;
    connect.fabric_options.spin = absl::Microseconds(config.fabric_spin_us);
    connect.providers = {config.fabric_provider};
    connect.host_id = transport::fabric::LocalHostId();
    const bool shm = config.transport == "shm";
    connect.fabric = shm ? transport::fabric::FabricUse::kOff
                         : transport::fabric::FabricUse::kRequired;
    connect.shm = shm ? transport::fabric::FabricUse::kRequired
                      : transport::fabric::FabricUse::kOff;
    STARLING_ASSIGN_OR_RETURN(
        transport::fabric::FabricRoutes routes,
        transport::fabric::ConnectFabric(tcp.get(), connect,
                                         absl::Now() + config.timeout));
    shm_path = routes.shm_path;
    fabric = shm ? static_cast<const transport::fabric::PeerPath*>(shm_path)
                 : routes.path;
  }
  const uint64_t registrations_before =
      fabric != nullptr ? fabric->registrations() : 0;
  collective::CommunicatorOptions copts;
  copts.timeout = config.timeout;
  if (config.chunk_bytes > 0) copts.chunk_bytes = config.chunk_bytes;
  STARLING_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(tcp.get(), copts));

  const bool printer = rank == 0;
  if (printer) {
    std::printf("# starling-bench: %s, %d ranks, dtype %s, reduce %s%s\n",
                std::string(OpName(config.op)).c_str(), comm->size(),
                std::string(collective::DataTypeName(config.dtype)).c_str(),
                std::string(collective::ReduceOpName(config.reduce)).c_str(),
                config.check ? ", checked against the fp64 reference" : "");
    std::printf("# transport: %s\n",
                tcp->PathName(comm->size() > 1 ? 1 : 0, "tcp").c_str());
    std::fputs(config.csv ? CsvHeader().c_str() : TableHeader().c_str(),
               stdout);
    std::fflush(stdout);
  }
  std::vector<std::byte> buffer;
  bool all_ok = true;
  std::string first_wrong;
  for (uint64_t elements : config.sizes) {
    for (Algorithm algorithm : config.algorithms) {
      STARLING_ASSIGN_OR_RETURN(
          CaseOutcome outcome,
          RunCase(comm.get(), config, elements, algorithm, &buffer));
      if (!outcome.first_wrong.empty()) {
        std::fprintf(stderr, "starling-bench: WRONG result: %s\n",
                     outcome.first_wrong.c_str());
      }
      all_ok = all_ok && outcome.result.ok;
      if (!printer) continue;
      const CaseResult& r = outcome.result;
      std::fputs(config.csv ? CsvRow(r).c_str() : TableRow(r).c_str(), stdout);
      if (config.peerbench) std::fputs(PeerbenchLine(r).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  if (shm_path != nullptr && printer) {
    std::printf(
        "# shared memory: large writes of %d of %d peers read from their "
        "memory directly (one copy)\n",
        shm_path->single_copy_peers(), comm->size() - 1);
  } else if (fabric != nullptr && printer) {
    // Memory is registered once, when the path opens: never per op.
    std::printf("# fabric registrations during the benchmark: %llu\n",
                static_cast<unsigned long long>(fabric->registrations() -
                                                registrations_before));
  }
  if (config.check && !all_ok) {
    return absl::DataLossError(
        "results differ from the fp64 reference (see the WRONG lines)");
  }
  return absl::OkStatus();
}

}  // namespace bench
}  // namespace starling
