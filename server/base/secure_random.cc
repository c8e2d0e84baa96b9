#include "server/base/secure_random.h"

#include <openssl/err.h>
#include <openssl/rand.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace starling {

absl::StatusOr<uint64_t> SecureRandom64(absl::string_view what) {
  uint64_t value = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&value), sizeof(value)) !=
      1) {
    char reason[256] = "no reason given";
    const unsigned long error = ERR_get_error();
    if (error != 0) ERR_error_string_n(error, reason, sizeof(reason));
    return absl::InternalError(
        absl::StrCat("no random bits for ", what,
                     ": OpenSSL's generator (RAND_bytes) failed: ", reason));
  }
  return value;
}

}  // namespace starling
