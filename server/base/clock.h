// Clock: where components read the time, so that tests can drive time by
// hand instead of sleeping. RealClock reads the system clock; FakeClock holds
// a time that only moves when a test moves it.
//
//   RealClock clock;                       // in main.cc
//   FakeClock clock;                       // in tests
//   clock.Advance(absl::Seconds(6));
//
// A component borrows its Clock (a `const Clock*` in its Options or
// constructor); the clock must outlive it. Both implementations are
// thread-safe.
#ifndef STARLING_SERVER_BASE_CLOCK_H_
#define STARLING_SERVER_BASE_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace starling {

class Clock {
 public:
  virtual ~Clock() = default;

  // The current time. Thread-safe.
  virtual absl::Time Now() const = 0;
};

// The system's wall clock (absl::Now()). Stateless; thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override;
};

// A clock that stands still until told otherwise. Thread-safe.
class FakeClock final : public Clock {
 public:
  // Starts at `start` (default: 2026-01-01 00:00:00 UTC, a fixed, readable
  // time so that logs and expectations do not depend on the real date).
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1767225600));

  absl::Time Now() const override;

  // Moves the time forward by `delta`. REQUIRES: delta >= 0 (time never
  // runs backwards; a negative delta is a bug in the test and aborts).
  void Advance(absl::Duration delta);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace starling

#endif  // STARLING_SERVER_BASE_CLOCK_H_
