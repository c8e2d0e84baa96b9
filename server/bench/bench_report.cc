#include "server/bench/bench_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace starling {
namespace bench {

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "allreduce";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllGather:
      return "allgather";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "unknown";
}

absl::StatusOr<Op> ParseOp(absl::string_view name) {
  for (Op op :
       {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather, Op::kBroadcast}) {
    if (name == OpName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown op '", name,
      "': expected allreduce, reduce_scatter, allgather or broadcast"));
}

double BusBandwidthFactor(Op op, int ranks) {
  const double n = ranks;
  switch (op) {
    case Op::kAllReduce:
      return ranks > 1 ? 2.0 * (n - 1) / n : 0.0;
    case Op::kReduceScatter:
    case Op::kAllGather:
      return ranks > 1 ? (n - 1) / n : 0.0;
    case Op::kBroadcast:
      return ranks > 1 ? 1.0 : 0.0;
  }
  return 0.0;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double CaseResult::algbw_gb_s() const {
  return median_s > 0 ? bytes / median_s / 1e9 : 0;
}

double CaseResult::busbw_gb_s() const {
  return algbw_gb_s() * BusBandwidthFactor(op, ranks);
}

double CaseResult::bound_s() const {
  if (link_bytes_per_s <= 0) return 0;
  return BusBandwidthFactor(op, ranks) * bytes / link_bytes_per_s;
}

double CaseResult::ratio_to_bound() const {
  const double b = bound_s();
  return b > 0 ? median_s / b : 0;
}

std::string TableHeader() {
  return absl::StrFormat(
      "%12s %14s %-13s %-9s %11s %11s %9s %9s %8s %5s %6s %5s\n"
      "%12s %14s %-13s %-9s %11s %11s %9s %9s %8s %5s %6s %5s\n",
      "size", "bytes", "algorithm", "dtype", "median", "min", "algbw", "busbw",
      "x_bound", "cpu", "rank", "check", "(elements)", "", "", "", "(us)",
      "(us)", "(GB/s)", "(GB/s)", "", "(%)", "(core)", "");
}

std::string TableRow(const CaseResult& r) {
  const std::string ratio = r.link_bytes_per_s > 0
                                ? absl::StrFormat("%.3f", r.ratio_to_bound())
                                : std::string("-");
  const char* check = !r.checked ? "-" : (r.ok ? "ok" : "WRONG");
  return absl::StrFormat(
      "%12d %14d %-13s %-9s %11.1f %11.1f %9.4f %9.4f %8s %5.0f %6.2f %5s\n",
      r.elements, r.bytes, r.algorithm, r.dtype, r.median_s * 1e6,
      r.min_s * 1e6, r.algbw_gb_s(), r.busbw_gb_s(), ratio, r.cpu_util * 100,
      r.rank_cores, check);
}

std::string CsvHeader() {
  return "op,algorithm,dtype,ranks,elements,bytes,iterations,median_s,min_s,"
         "rank0_median_s,algbw_gb_s,busbw_gb_s,bound_s,ratio_to_bound,"
         "cpu_util,check,rank_cores\n";
}

std::string CsvRow(const CaseResult& r) {
  return absl::StrFormat(
      "%s,%s,%s,%d,%d,%d,%d,%.9g,%.9g,%.9g,%.6g,%.6g,%.9g,%.4f,%.3f,%s,%.3f\n",
      OpName(r.op), r.algorithm, r.dtype, r.ranks, r.elements, r.bytes,
      r.iterations, r.median_s, r.min_s, r.rank0_median_s, r.algbw_gb_s(),
      r.busbw_gb_s(), r.bound_s(), r.ratio_to_bound(), r.cpu_util,
      !r.checked ? "unchecked" : (r.ok ? "ok" : "wrong"), r.rank_cores);
}

std::string PeerbenchLine(const CaseResult& r) {
  return absl::StrFormat("PEERBENCH,%s,%d,%d,%d,%.9g,%.9g,%.9g,%.3f,%d\n",
                         r.algorithm, r.ranks, r.elements, r.iterations,
                         r.rank0_median_s, r.min_s, r.median_s, r.cpu_util,
                         r.ok ? 1 : 0);
}

}  // namespace bench
}  // namespace starling
