#include "server/bench/cpu_usage.h"

#include <cstdio>

namespace starling {
namespace bench {

CpuUsage::Sample CpuUsage::Read() {
  Sample s;
  FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return s;
  // user nice system idle iowait irq softirq steal (guest is inside user).
  unsigned long long v[8] = {0};
  if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
                  &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4) {
    for (unsigned long long x : v) s.total += x;
    s.busy = s.total - v[3] - v[4];
  }
  std::fclose(f);
  return s;
}

void CpuUsage::Begin() { start_ = Read(); }

void CpuUsage::End() {
  const Sample end = Read();
  busy_ += end.busy - start_.busy;
  total_ += end.total - start_.total;
}

double CpuUsage::BusyFraction() const {
  return total_ > 0 ? static_cast<double>(busy_) / total_ : 0;
}

}  // namespace bench
}  // namespace starling
