#include "server/base/clock.h"

#include "absl/time/clock.h"
#include "server/base/logging.h"

namespace starling {

absl::Time RealClock::Now() const { return absl::Now(); }

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration delta) {
  STARLING_CHECK(delta >= absl::ZeroDuration())
      << "FakeClock cannot run backwards by " << delta;
  absl::MutexLock lock(&mu_);
  now_ += delta;
}

}  // namespace starling
