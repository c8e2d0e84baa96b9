#include "server/shard/finite_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace starling {
namespace shard {
namespace {

constexpr uint32_t kExponentMask = 0x7f800000u;

// Scanned per block without branches; only a block that holds a bad value
// is searched again element by element.
constexpr size_t kBlockElements = 4096;

bool BlockHasNonFinite(const float* values, size_t n) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof(bits));
    // All exponent bits set: infinity or NaN.
    bad |= static_cast<uint32_t>((bits & kExponentMask) == kExponentMask);
  }
  return bad != 0;
}

}  // namespace

absl::Status CheckFinite(absl::Span<const float> values,
                         absl::string_view what) {
  for (size_t begin = 0; begin < values.size(); begin += kBlockElements) {
    const size_t n = std::min(kBlockElements, values.size() - begin);
    if (!BlockHasNonFinite(values.data() + begin, n)) continue;
    for (size_t i = begin; i < begin + n; ++i) {
      if (!std::isfinite(values[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " element ", i, " of ", values.size(), " is ",
                         std::isnan(values[i]) ? "nan"
                         : values[i] > 0       ? "inf"
                                               : "-inf"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace shard
}  // namespace starling
