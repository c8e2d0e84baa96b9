// CPU use over the timed regions of a benchmark: the whole machine's busy
// fraction between two samples of /proc/stat (the 2-core machines here are
// often the bottleneck, so every figure is reported beside it), and this
// process's own CPU time (getrusage: every thread, user and system) per
// second of wall time, i.e. the cores one rank keeps busy, polling
// included. Thread-compatible.
#ifndef STARLING_SERVER_BENCH_CPU_USAGE_H_
#define STARLING_SERVER_BENCH_CPU_USAGE_H_

#include <cstdint>

namespace starling {
namespace bench {

class CpuUsage {
 public:
  // Starts a timed region.
  void Begin();
  // Ends it, adding its busy and total jiffies.
  void End();
  // Busy fraction (0..1, all cores) over every region so far; 0 if none.
  // Jiffy resolution: meaningful once the regions add up to ~1 s.
  double BusyFraction() const;
  // This process's CPU seconds per wall second over every region so far
  // (1.0: one core busy the whole time); 0 if none.
  double ProcessCores() const;

 private:
  struct Sample {
    uint64_t busy = 0;
    uint64_t total = 0;
  };
  static Sample Read();
  // This process's user + system CPU time so far, in seconds.
  static double ProcessSeconds();
  // Monotonic wall clock, in seconds.
  static double WallSeconds();

  Sample start_;
  uint64_t busy_ = 0;
  uint64_t total_ = 0;
  double process_start_ = 0;
  double wall_start_ = 0;
  double process_s_ = 0;
  double wall_s_ = 0;
};

}  // namespace bench
}  // namespace starling

#endif  // STARLING_SERVER_BENCH_CPU_USAGE_H_
