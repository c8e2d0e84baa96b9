// Whole-machine CPU busy fraction between two samples of /proc/stat, summed
// over the timed regions of a benchmark (the 2-core machines here are often
// the bottleneck, so every figure is reported beside it). Thread-compatible.
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

 private:
  struct Sample {
    uint64_t busy = 0;
    uint64_t total = 0;
  };
  static Sample Read();

  Sample start_;
  uint64_t busy_ = 0;
  uint64_t total_ = 0;
};

}  // namespace bench
}  // namespace starling

#endif  // STARLING_SERVER_BENCH_CPU_USAGE_H_
