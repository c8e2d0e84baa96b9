// FlushDenormals: while it lives, this thread's SSE arithmetic treats
// subnormal floats (below 1.18e-38 in magnitude) as zero, on input and on
// output (MXCSR's DAZ and FTZ bits); the previous mode comes back when it
// goes.
//
// Why: on x86 CPUs an operation on a subnormal float takes a microcode
// assist, about a hundred times a normal one. A daemon's optimizer meets
// them as a matter of course: momentum of a parameter whose gradient stays
// zero (a dead ReLU unit) decays by the momentum factor each step and
// spends hundreds of steps subnormal, so a CNN's step on a GPU worker went
// from 1.8 to 6 ms of daemon time after its first epoch on an H100 machine
// (tests/bench/GPU.md). A subnormal value is below float32's resolution of
// any normal parameter, gradient or moment it is added to; zero changes no
// such sum. Every daemon applies the same updates with the same mode, so
// replicas and continuations stay bit for bit equal.
//
// Thread-compatible; one per scope.
#ifndef STARLING_SERVER_BASE_FLUSH_DENORMALS_H_
#define STARLING_SERVER_BASE_FLUSH_DENORMALS_H_

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace starling {

class FlushDenormals {
 public:
#if defined(__SSE__)
  static constexpr unsigned kFtz = 0x8000;  // flush-to-zero (results)
  static constexpr unsigned kDaz = 0x0040;  // denormals-are-zero (inputs)
  FlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormals() { _mm_setcsr(saved_); }
#else
  FlushDenormals() = default;
#endif
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
#if defined(__SSE__)
  const unsigned saved_;
#endif
};

}  // namespace starling

#endif  // STARLING_SERVER_BASE_FLUSH_DENORMALS_H_
