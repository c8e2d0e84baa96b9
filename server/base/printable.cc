#include "server/base/printable.h"

#include "absl/strings/str_cat.h"

namespace starling {

std::string BoundedPrintable(absl::string_view text, size_t max) {
  std::string out(text.substr(0, max));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  if (text.size() > max) {
    absl::StrAppend(&out, "... (", text.size() - max, " more bytes)");
  }
  return out;
}

}  // namespace starling
