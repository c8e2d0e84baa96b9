// CpuFeatures: the instruction-set extensions Starling's own kernels choose
// their path by, read once per process.
//
//   if (CpuFeaturesInUse().f16c) { ...F16C path... } else { ...portable... }
//
// STARLING_PORTABLE_KERNELS=1 in a process's environment turns every one of
// them off, so that the portable (baseline x86-64) paths run whatever the
// CPU offers: `tests/run_all.sh` runs the whole suite once that way, with
// OpenBLAS's and PyTorch's own switches (OPENBLAS_CORETYPE=Prescott,
// ATEN_CPU_CAPABILITY=default) beside it, so that a machine without
// AVX-512, AVX2 or F16C is covered by the machine CI has. Values "", "0",
// "false" and "no" leave the detected features on; any other value turns
// them off.
//
// Each path is required to give the same bits as the portable one (the
// data_type tests check it over every 16-bit value), so the switch changes
// speed, never results.
//
// The one environment variable read outside a main.cc: kernels are chosen
// in libraries that run where no main() of ours passes options (the client
// inside a Python worker), and the switch has to reach every process of a
// test in one place, as OpenBLAS's OPENBLAS_CORETYPE does.
#ifndef STARLING_SERVER_BASE_CPU_FEATURES_H_
#define STARLING_SERVER_BASE_CPU_FEATURES_H_

namespace starling {

struct CpuFeatures {
  // F16C with AVX state saved by the OS: 8 float16 <-> float32 per
  // instruction (VCVTPH2PS / VCVTPS2PH).
  bool f16c = false;
};

// What the CPU offers (CPUID and XGETBV), ignoring the environment.
CpuFeatures DetectCpuFeatures();

// True when STARLING_PORTABLE_KERNELS asks for the portable paths.
bool PortableKernelsRequested();

// DetectCpuFeatures(), or none of them when PortableKernelsRequested();
// computed on first use and fixed for the life of the process. Thread-safe.
const CpuFeatures& CpuFeaturesInUse();

}  // namespace starling

#endif  // STARLING_SERVER_BASE_CPU_FEATURES_H_
