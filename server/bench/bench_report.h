// What starling-bench measures for one case, and how it is printed: an
// nccl-tests-style table, CSV, and the PEERBENCH line that
// ../shared/peerbench/run.sh reads. Plain values; thread-compatible.
//
// Bandwidths follow nccl-tests' definitions. algbw = bytes / time, where
// bytes is the whole vector (for all-gather: the gathered result). busbw
// scales algbw by what each rank's link must carry at least:
//   all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N, broadcast 1.
// The bound is the time that traffic needs on one link of --link-gbps:
// bound_s = busbw_factor * bytes / link_bytes_per_s, and ratio = time/bound
// (1.0 is the link's limit; TCP/IP headers alone make it 1.046 at MTU 1500).
#ifndef STARLING_SERVER_BENCH_BENCH_REPORT_H_
#define STARLING_SERVER_BENCH_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {
namespace bench {

enum class Op { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

absl::string_view OpName(Op op);  // "allreduce", "reduce_scatter", ...
absl::StatusOr<Op> ParseOp(absl::string_view name);

// busbw / algbw for `op` on `ranks` ranks (see the file comment).
double BusBandwidthFactor(Op op, int ranks);

// Median of `values` (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> values);

struct CaseResult {
  Op op = Op::kAllReduce;
  std::string algorithm;  // the algorithm that ran; auto: "auto:<chosen>"
  std::string dtype;
  int ranks = 1;
  uint64_t elements = 0;
  uint64_t bytes = 0;
  int iterations = 0;         // timed iterations done
  double median_s = 0;        // median over iterations of the slowest rank
  double min_s = 0;           // rank 0's fastest iteration
  double rank0_median_s = 0;  // rank 0's own median
  double cpu_util = 0;        // whole-machine busy fraction, 0..1
  // The busiest rank's own CPU (all its threads) per second of the timed
  // regions, in cores: what polling and the rank's threads cost.
  double rank_cores = 0;
  double link_bytes_per_s = 0;  // 0: no bound known
  bool ok = true;               // every checked element matched
  bool checked = false;         // --check was on

  double algbw_gb_s() const;  // GB/s (1e9 B/s)
  double busbw_gb_s() const;
  double bound_s() const;         // 0 without a link rate
  double ratio_to_bound() const;  // 0 without a link rate
};

// The table: a header (two lines) then one row per case.
std::string TableHeader();
std::string TableRow(const CaseResult& r);

std::string CsvHeader();
std::string CsvRow(const CaseResult& r);

// PEERBENCH,<algorithm>,<N>,<S>,<iters>,<rank0_median_s>,<rank0_min_s>,
// <median_max_s>,<cpu_util>,<ok>
std::string PeerbenchLine(const CaseResult& r);

}  // namespace bench
}  // namespace starling

#endif  // STARLING_SERVER_BENCH_BENCH_REPORT_H_
