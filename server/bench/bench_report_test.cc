#include "server/bench/bench_report.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/base/status_matchers.h"

namespace starling {
namespace bench {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(BenchReport, BusBandwidthFollowsNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Op::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Op::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Op::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Op::kBroadcast, 3), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(Op::kAllReduce, 1), 0.0);
}

TEST(BenchReport, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

TEST(BenchReport, RatioToBoundOfAllReduceOnFourHostsAtOneGbit) {
  CaseResult r;
  r.op = Op::kAllReduce;
  r.ranks = 4;
  r.elements = 10000000;
  r.bytes = 40000000;
  r.link_bytes_per_s = 125e6;  // 1 Gbit/s
  // Bound: 2*3/4 * 40 MB / 125 MB/s = 0.48 s.
  EXPECT_DOUBLE_EQ(r.bound_s(), 0.48);
  r.median_s = 0.5136;
  EXPECT_THAT(r.ratio_to_bound(), DoubleNear(1.07, 1e-9));
  EXPECT_THAT(r.algbw_gb_s(), DoubleNear(40e6 / 0.5136 / 1e9, 1e-12));
  EXPECT_THAT(r.busbw_gb_s(), DoubleNear(1.5 * 40e6 / 0.5136 / 1e9, 1e-12));
}

TEST(BenchReport, PeerbenchLineMatchesRunShContract) {
  CaseResult r;
  r.algorithm = "butterfly";
  r.ranks = 4;
  r.elements = 1000000;
  r.iterations = 20;
  r.rank0_median_s = 0.05;
  r.min_s = 0.049;
  r.median_s = 0.051;
  r.cpu_util = 0.25;
  r.ok = true;
  EXPECT_EQ(PeerbenchLine(r),
            "PEERBENCH,butterfly,4,1000000,20,0.05,0.049,0.051,0.250,1\n");
}

TEST(BenchReport, TableRowShowsWrongResultsAndMissingBound) {
  CaseResult r;
  r.algorithm = "ring";
  r.dtype = "float32";
  r.elements = 1000;
  r.bytes = 4000;
  r.median_s = 1e-4;
  r.checked = true;
  r.ok = false;
  const std::string row = TableRow(r);
  EXPECT_THAT(row, HasSubstr("WRONG"));
  EXPECT_THAT(row, HasSubstr(" - "));  // no --link-gbps: no ratio
  EXPECT_THAT(TableHeader(), StartsWith("        size"));
  EXPECT_THAT(CsvRow(r), StartsWith("allreduce,ring,float32,1,1000,4000,"));
}

TEST(BenchReport, RowsCarryTheBusiestRanksCores) {
  CaseResult r;
  r.algorithm = "tree";
  r.dtype = "float32";
  r.elements = 1000;
  r.bytes = 4000;
  r.median_s = 3e-4;
  r.cpu_util = 0.9;
  r.rank_cores = 0.42;
  EXPECT_THAT(CsvHeader(), HasSubstr(",check,rank_cores\n"));
  EXPECT_THAT(CsvRow(r), ::testing::EndsWith(",unchecked,0.420\n"));
  EXPECT_THAT(TableHeader(), HasSubstr("(core)"));
  EXPECT_THAT(TableRow(r), HasSubstr("   90   0.42 "));
}

TEST(BenchReport, ParsesOps) {
  ASSERT_OK_AND_ASSIGN(Op op, ParseOp("reduce_scatter"));
  EXPECT_EQ(op, Op::kReduceScatter);
  EXPECT_THAT(ParseOp("gather"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("unknown op 'gather'")));
}

}  // namespace
}  // namespace bench
}  // namespace starling
