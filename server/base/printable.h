// Text a peer or a worker sent, made safe to show: logs, error messages,
// `starlingctl` output and an operator's terminal. Thread-safe: no state.
#ifndef STARLING_SERVER_BASE_PRINTABLE_H_
#define STARLING_SERVER_BASE_PRINTABLE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace starling {

// `text` cut to its first `max` bytes (then "... (N more bytes)" says how
// much was left out), every byte outside printable ASCII (0x20..0x7e: a
// control byte, an escape sequence's start, a UTF-8 byte) shown as '?', so
// that it can neither rewrite a screen nor swell a line without bound.
std::string BoundedPrintable(absl::string_view text, size_t max);

}  // namespace starling

#endif  // STARLING_SERVER_BASE_PRINTABLE_H_
