#include "server/metrics/metric_name.h"

#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace starling {
namespace metrics {
namespace {

constexpr absl::string_view kPrefix = "starling_";

bool IsLowerSnake(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

bool IsLabelStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool IsLabelChar(char c) { return IsLabelStart(c) || (c >= '0' && c <= '9'); }

absl::Status Invalid(absl::string_view name, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("metric name '", name, "' ", why));
}

}  // namespace

absl::Status ValidateMetricName(absl::string_view name, MetricType type) {
  if (!absl::StartsWith(name, kPrefix)) {
    return Invalid(name,
                   "must start with 'starling_' (starling_<subsystem>_"
                   "<what>_<unit>)");
  }
  for (char c : name) {
    if (!IsLowerSnake(c)) {
      return Invalid(name, absl::StrCat("has character '", std::string(1, c),
                                        "': use lower-case snake_case "
                                        "[a-z0-9_]"));
    }
  }
  if (absl::StrContains(name, "__")) return Invalid(name, "contains '__'");
  if (absl::EndsWith(name, "_")) return Invalid(name, "ends with '_'");
  const std::vector<absl::string_view> words = absl::StrSplit(name, '_');
  if (words.size() < 3) {
    return Invalid(name,
                   "needs a subsystem and what it measures "
                   "(starling_<subsystem>_<what>_<unit>)");
  }
  const bool ends_total = absl::EndsWith(name, "_total");
  if (type == MetricType::kCounter && !ends_total) {
    return Invalid(name, "is a counter and must end in '_total'");
  }
  if (type != MetricType::kCounter && ends_total) {
    return Invalid(name, absl::StrCat("is a ", MetricTypeName(type),
                                      "; only counters end in '_total'"));
  }
  if (type == MetricType::kHistogram) {
    for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (absl::EndsWith(name, suffix)) {
        return Invalid(
            name, absl::StrCat("is a histogram and must not end in '", suffix,
                               "' (the encoder adds it)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelNames(const std::vector<std::string>& label_names) {
  std::set<absl::string_view> seen;
  for (const std::string& label : label_names) {
    if (label.empty()) return absl::InvalidArgumentError("empty label name");
    if (!IsLabelStart(label[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label name '", label, "' must start with a letter or '_'"));
    }
    for (char c : label) {
      if (!IsLabelChar(c)) {
        return absl::InvalidArgumentError(
            absl::StrCat("label name '", label, "' has character '",
                         std::string(1, c), "': use [a-zA-Z0-9_]"));
      }
    }
    if (absl::StartsWith(label, "__")) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label,
                       "' starts with '__' (reserved by Prometheus)"));
    }
    if (label == "le" || label == "quantile") {
      return absl::InvalidArgumentError(absl::StrCat(
          "label name '", label,
          "' is reserved (histogram buckets / summary quantiles)"));
    }
    if (!seen.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("label name '", label, "' appears twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace metrics
}  // namespace starling
