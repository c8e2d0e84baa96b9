// Random values for what another process, run or group must neither repeat
// nor guess: fabric memory keys, names of shared-memory segments, nonces,
// the ids that tell one exchange of state from another. Drawn from
// OpenSSL's generator (RAND_bytes), which the kernel seeds (getrandom).
//
// Not std::random_device: on x86-64 libstdc++ takes it straight from the
// CPU's RDSEED/RDRAND instruction, and CPUs with a faulty one hand every
// caller the same value while reporting success (AMD Zen 5's 32-bit RDSEED
// returns 0, CVE-2025-62626; some earlier AMD parts return all ones from
// RDRAND). Seeded from that, two groups in one process registered their
// memory under the same keys. Stateless functions; thread-safe.
#ifndef STARLING_SERVER_BASE_SECURE_RANDOM_H_
#define STARLING_SERVER_BASE_SECURE_RANDOM_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace starling {

// 64 random bits. Internal naming `what` (the value it was for) and
// OpenSSL's reason if the generator has no entropy to give.
absl::StatusOr<uint64_t> SecureRandom64(absl::string_view what);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_SECURE_RANDOM_H_
