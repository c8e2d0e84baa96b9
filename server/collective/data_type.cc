#include "server/collective/data_type.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace starling {
namespace collective {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAverage:
      return "average";
  }
  return "unknown";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "sum") return ReduceOp::kSum;
  if (lower == "min") return ReduceOp::kMin;
  if (lower == "max") return ReduceOp::kMax;
  if (lower == "average" || lower == "avg") return ReduceOp::kAverage;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduce op \"", name, "\" (want sum, min, max or average)"));
}

}  // namespace collective
}  // namespace starling
