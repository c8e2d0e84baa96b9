#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "worker/trainer/trainer.h"

namespace starling {
namespace trainer {

absl::StatusOr<InitFrom> ParseInitFrom(absl::string_view text) {
  InitFrom init;
  if (text == "all") {
    init.kind = InitFrom::Kind::kAll;
    return init;
  }
  if (text == "none") {
    init.kind = InitFrom::Kind::kNone;
    return init;
  }
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &init.rank) ||
      !absl::SimpleAtoi(parts[1], &init.index) || init.rank < 0 ||
      init.index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\"",
                     ": expected RANK:INDEX (e.g. 0:0), \"all\" or \"none\""));
  }
  return init;
}

}  // namespace trainer
}  // namespace starling
