#include "server/bench/cpu_usage.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace starling {
namespace bench {
namespace {

TEST(CpuUsage, NothingMeasuredIsZero) {
  CpuUsage cpu;
  EXPECT_EQ(cpu.ProcessCores(), 0);
  EXPECT_EQ(cpu.BusyFraction(), 0);
}

TEST(CpuUsage, ARankThatSleepsKeepsNoCoreBusy) {
  // A rank blocked in the kernel for the whole region costs (almost) no
  // CPU: the figure is this process's time, not the machine's.
  CpuUsage cpu;
  cpu.Begin();
  absl::SleepFor(absl::Milliseconds(200));
  cpu.End();
  EXPECT_GE(cpu.ProcessCores(), 0);
  EXPECT_LT(cpu.ProcessCores(), 0.25);
  EXPECT_GE(cpu.BusyFraction(), 0);
  EXPECT_LE(cpu.BusyFraction(), 1);
}

TEST(CpuUsage, ARankThatComputesShowsItsCpuTime) {
  // Work of a known CPU time: spin until this process has used 100 ms of
  // CPU; the regions' CPU seconds then cover it, whatever the wall time.
  CpuUsage cpu;
  cpu.Begin();
  const clock_t start = clock();
  volatile uint64_t sink = 0;
  while (clock() - start < CLOCKS_PER_SEC / 10) sink = sink + 1;
  cpu.End();
  EXPECT_GT(cpu.ProcessCores(), 0);
  EXPECT_LE(cpu.ProcessCores(), 1.5);  // one thread: one core, and rounding
}

}  // namespace
}  // namespace bench
}  // namespace starling
