#include "server/base/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"

namespace starling {

namespace {

constexpr char kPortableVariable[] = "STARLING_PORTABLE_KERNELS";

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures features;
#if defined(__x86_64__)
  // F16C and AVX (CPUID leaf 1, ECX bits 29 and 28), OSXSAVE (bit 27), and
  // the XMM/YMM state saved by the OS (XCR0 bits 1-2).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return features;
  constexpr unsigned kNeeded = (1u << 27) | (1u << 28) | (1u << 29);
  if ((ecx & kNeeded) != kNeeded) return features;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  features.f16c = (xcr0_low & 6u) == 6u;
#endif
  return features;
}

bool PortableKernelsRequested() {
  const char* value = std::getenv(kPortableVariable);
  if (value == nullptr) return false;
  const std::string v = absl::AsciiStrToLower(value);
  return !(v.empty() || v == "0" || v == "false" || v == "no");
}

const CpuFeatures& CpuFeaturesInUse() {
  static const CpuFeatures in_use =
      PortableKernelsRequested() ? CpuFeatures{} : DetectCpuFeatures();
  return in_use;
}

}  // namespace starling
