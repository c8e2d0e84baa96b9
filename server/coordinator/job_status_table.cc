#include "server/coordinator/job_status_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace starling {
namespace coordinator {
namespace {

std::string HealthName(proto::NodeHealth health) {
  switch (health) {
    case proto::NODE_HEALTH_JOINING:
      return "JOINING";
    case proto::NODE_HEALTH_HEALTHY:
      return "HEALTHY";
    case proto::NODE_HEALTH_LOST:
      return "LOST";
    case proto::NODE_HEALTH_LEFT:
      return "LEFT";
    default:
      return "?";
  }
}

// A cell never spans lines.
std::string OneLine(const std::string& text) {
  return text.empty() ? "-" : absl::StrReplaceAll(text, {{"\n", " "}});
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatJobStatusTable(const proto::JobStatus& status) {
  std::vector<std::vector<std::string>> rows = {{"RANK", "HOSTNAME", "ADDRESS",
                                                 "HEALTH", "SHARD", "OPT STATE",
                                                 "HEARTBEAT", "LAST ERROR"}};
  for (const proto::NodeStatus& node : status.nodes()) {
    const bool ranked = node.peer().rank() >= 0;
    rows.push_back({
        ranked ? absl::StrCat(node.peer().rank()) : "-",
        OneLine(node.peer().hostname()),
        OneLine(node.peer().data_address()),
        HealthName(node.peer().health()),
        ranked ? FormatBytes(node.shard_bytes()) : "-",
        ranked ? FormatBytes(node.optimizer_state_bytes()) : "-",
        ranked ? absl::StrFormat("%.1fs ago", node.heartbeat_age_seconds())
               : "-",
        OneLine(node.last_error()),
    });
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }

  std::string out;
  if (status.formed()) {
    absl::StrAppend(&out, "job ", status.job_id(), ": ", status.healthy_nodes(),
                    " of ", status.group_size(), " nodes healthy, group epoch ",
                    status.group_epoch(), "\n");
  } else {
    absl::StrAppend(&out, "job ", status.job_id(), ": group not formed yet, ",
                    status.nodes_size(), " of ", status.expected_nodes(),
                    " nodes joined\n");
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c + 1 == row.size()) {
        absl::StrAppend(&line, row[c]);
      } else {
        absl::StrAppend(&line, row[c],
                        std::string(widths[c] - row[c].size() + 2, ' '));
      }
    }
    absl::StrAppend(&out, line, "\n");
  }
  if (status.formed()) {
    absl::StrAppend(
        &out, "epoch ", status.epoch(), " of ", status.epochs(), ", iteration ",
        status.iteration(), " (", status.iterations_per_epoch(),
        " per epoch); degraded: ", status.degraded() ? "yes" : "no", "\n");
  }
  absl::StrAppend(&out, "last error: ", OneLine(status.last_error()), "\n");
  return out;
}

}  // namespace coordinator
}  // namespace starling
