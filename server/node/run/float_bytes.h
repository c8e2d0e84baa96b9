// AsBytes / AsConstBytes: a float buffer viewed as the bytes the
// collectives, reduce kernels and transport take (no copy).
#ifndef STARLING_SERVER_NODE_RUN_FLOAT_BYTES_H_
#define STARLING_SERVER_NODE_RUN_FLOAT_BYTES_H_

#include <cstddef>

#include "absl/types/span.h"

namespace starling {
namespace node {

// The bytes of `data`; valid as long as `data` is.
inline absl::Span<std::byte> AsBytes(absl::Span<float> data) {
  return {reinterpret_cast<std::byte*>(data.data()),
          data.size() * sizeof(float)};
}

inline absl::Span<const std::byte> AsConstBytes(absl::Span<const float> data) {
  return {reinterpret_cast<const std::byte*>(data.data()),
          data.size() * sizeof(float)};
}

}  // namespace node
}  // namespace starling

#endif  // STARLING_SERVER_NODE_RUN_FLOAT_BYTES_H_
