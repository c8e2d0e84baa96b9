#include "server/bench/cpu_usage.h"

#include <sys/resource.h>
#include <time.h>

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

double CpuUsage::ProcessSeconds() {
  struct rusage usage = {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const struct timeval& tv) {
    return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double CpuUsage::WallSeconds() {
  struct timespec ts = {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

void CpuUsage::Begin() {
  start_ = Read();
  process_start_ = ProcessSeconds();
  wall_start_ = WallSeconds();
}

void CpuUsage::End() {
  const Sample end = Read();
  busy_ += end.busy - start_.busy;
  total_ += end.total - start_.total;
  process_s_ += ProcessSeconds() - process_start_;
  wall_s_ += WallSeconds() - wall_start_;
}

double CpuUsage::ProcessCores() const {
  return wall_s_ > 0 ? process_s_ / wall_s_ : 0;
}

double CpuUsage::BusyFraction() const {
  return total_ > 0 ? static_cast<double>(busy_) / total_ : 0;
}

}  // namespace bench
}  // namespace starling
