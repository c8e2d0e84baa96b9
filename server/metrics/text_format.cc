#include "server/metrics/text_format.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace starling {
namespace metrics {
namespace {

// `{a="x",b="y"}` from names and values, with an optional extra pair last
// (the histogram's `le`); empty when there are no labels at all.
std::string LabelBlock(const std::vector<std::string>& names,
                       const std::vector<std::string>& values,
                       absl::string_view extra_name = "",
                       absl::string_view extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", names[i], "=\"",
                    EscapeLabelValue(values[i]), "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "{" : ",", extra_name, "=\"",
                    EscapeLabelValue(extra_value), "\"");
  }
  if (!out.empty()) out += "}";
  return out;
}

void AppendSample(std::string* out, absl::string_view name,
                  absl::string_view labels, absl::string_view value) {
  absl::StrAppend(out, name, labels, " ", value, "\n");
}

}  // namespace

std::string EscapeHelpText(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // The shortest of %.15g .. %.17g that reads back as the same double:
  // 0.1 stays "0.1" rather than "0.10000000000000001".
  for (int precision = 15; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

std::string EncodeTextFormat(const std::vector<FamilySnapshot>& families) {
  std::string out;
  for (const FamilySnapshot& family : families) {
    absl::StrAppend(&out, "# HELP ", family.name, " ",
                    EscapeHelpText(family.help), "\n");
    absl::StrAppend(&out, "# TYPE ", family.name, " ",
                    MetricTypeName(family.type), "\n");
    for (const SeriesSnapshot& series : family.series) {
      const std::string labels =
          LabelBlock(family.label_names, series.label_values);
      if (family.type != MetricType::kHistogram) {
        AppendSample(&out, family.name, labels,
                     FormatSampleValue(series.value));
        continue;
      }
      const HistogramData& h = series.histogram;
      const std::string bucket = absl::StrCat(family.name, "_bucket");
      for (size_t i = 0; i < h.cumulative_counts.size(); ++i) {
        const std::string le = i < h.upper_bounds.size()
                                   ? FormatSampleValue(h.upper_bounds[i])
                                   : "+Inf";
        AppendSample(
            &out, bucket,
            LabelBlock(family.label_names, series.label_values, "le", le),
            absl::StrCat(h.cumulative_counts[i]));
      }
      AppendSample(&out, absl::StrCat(family.name, "_sum"), labels,
                   FormatSampleValue(h.sum));
      AppendSample(&out, absl::StrCat(family.name, "_count"), labels,
                   absl::StrCat(h.count));
    }
  }
  return out;
}

}  // namespace metrics
}  // namespace starling
