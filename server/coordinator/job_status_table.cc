#include "server/coordinator/job_status_table.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

std::string RunStateName(proto::RunStatus::State state) {
  switch (state) {
    case proto::RunStatus::STATE_DECLARING:
      return "DECLARING";
    case proto::RunStatus::STATE_RUNNING:
      return "RUNNING";
    case proto::RunStatus::STATE_FINISHED:
      return "FINISHED";
    case proto::RunStatus::STATE_FAILED:
      return "FAILED";
    default:
      return "?";
  }
}

std::string WorkerStateName(proto::WorkerStatus::State state) {
  switch (state) {
    case proto::WorkerStatus::STATE_ATTACHED:
      return "ATTACHED";
    case proto::WorkerStatus::STATE_MISSING:
      return "MISSING";
    case proto::WorkerStatus::STATE_FINISHED:
      return "FINISHED";
    default:
      return "?";
  }
}

// Cells left-aligned in columns two spaces apart, each line after `indent`.
void AppendColumns(const std::vector<std::vector<std::string>>& rows,
                   const std::string& indent, std::string* out) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c + 1 == row.size()) {
        absl::StrAppend(&line, row[c]);
      } else {
        absl::StrAppend(&line, row[c],
                        std::string(widths[c] - row[c].size() + 2, ' '));
      }
    }
    absl::StrAppend(out, line, "\n");
  }
}

// "1 worker", "2 workers".
std::string Count(int64_t n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
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

std::string FormatRun(const proto::RunStatus& run, double now_unix_seconds) {
  if (run.state() == proto::RunStatus::STATE_DECLARING && run.run_id() == 0) {
    return "next run DECLARING (some ranks wait in BeginRun)";
  }
  std::string out =
      absl::StrCat("run ", run.run_id(), " ", RunStateName(run.state()));
  const bool running = run.state() == proto::RunStatus::STATE_RUNNING;
  absl::StrAppend(&out, running ? ", " : " after ", Count(run.steps(), "step"));
  std::vector<std::string> facts;
  if (run.total_workers() > 0) {
    facts.push_back(Count(run.total_workers(), "worker"));
  }
  if (run.parameter_count() > 0) {
    facts.push_back(absl::StrCat(run.parameter_count(), " parameters"));
  }
  if (run.started_unix_seconds() > 0) {
    const double end = run.ended_unix_seconds() > 0 ? run.ended_unix_seconds()
                       : running                    ? now_unix_seconds
                                                    : 0;
    if (end >= run.started_unix_seconds()) {
      facts.push_back(absl::StrCat(
          running ? "for " : "",
          absl::StrFormat("%.1fs", end - run.started_unix_seconds())));
    }
  }
  if (!facts.empty()) {
    absl::StrAppend(&out, running ? ", " : " (", absl::StrJoin(facts, ", "),
                    running ? "" : ")");
  }
  if (!run.error().empty()) absl::StrAppend(&out, ": ", OneLine(run.error()));
  return out;
}

std::string FormatJobStatusTable(const proto::JobStatus& status) {
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "HOSTNAME", "ADDRESS", "HEALTH", "SHARD", "OPT STATE",
       "HEARTBEAT", "TRANSPORT", "LAST ERROR"}};
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
        // "-" until the node's data plane reported (or an older node).
        OneLine(node.transport()),
        OneLine(node.last_error()),
    });
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
  AppendColumns(rows, "", &out);

  // Per node: its run and its workers, when it reported them.
  bool workers_header = false;
  for (const proto::NodeStatus& node : status.nodes()) {
    const bool has_run =
        node.run().run_id() != 0 ||
        node.run().state() != proto::RunStatus::STATE_UNSPECIFIED;
    if (node.workers().empty() && !has_run) continue;
    if (!workers_header) {
      absl::StrAppend(&out, "workers:\n");
      workers_header = true;
    }
    absl::StrAppend(&out, "  rank ", node.peer().rank(), " (",
                    OneLine(node.peer().hostname()),
                    "): ", has_run ? FormatRun(node.run(), 0) : "no run", ", ",
                    Count(node.workers_size(), "worker"), "\n");
    std::vector<std::vector<std::string>> worker_rows;
    for (const proto::WorkerStatus& w : node.workers()) {
      std::vector<std::string> row = {
          absl::StrCat(w.index()), OneLine(w.name()),
          WorkerStateName(w.state()),
          absl::StrCat("next step ", w.next_step())};
      std::string note;
      if (w.state() == proto::WorkerStatus::STATE_MISSING) {
        note = absl::StrFormat("gone %.1fs, grace left %.1fs",
                               w.missing_seconds(), w.grace_left_seconds());
      } else if (w.pid() > 0) {
        note = absl::StrCat("pid ", w.pid());
      }
      row.push_back(note.empty() ? "-" : note);
      worker_rows.push_back(std::move(row));
    }
    AppendColumns(worker_rows, "    ", &out);
  }

  if (status.formed()) {
    absl::StrAppend(
        &out, "epoch ", status.epoch(), " of ", status.epochs(), ", iteration ",
        status.iteration(), " (", status.iterations_per_epoch(),
        " per epoch); degraded: ", status.degraded() ? "yes" : "no", "\n");
    if (!status.reformed_because().empty()) {
      absl::StrAppend(
          &out, "group epoch ", status.group_epoch(), " re-formed ",
          absl::StrFormat("%.1fs ago",
                          std::max(0.0, status.status_unix_seconds() -
                                            status.reformed_unix_seconds())),
          ": ", OneLine(status.reformed_because()), "\n");
    }
  }
  if (status.has_current_run() || status.recent_runs_size() > 0) {
    absl::StrAppend(&out, "runs:\n");
    if (status.has_current_run()) {
      absl::StrAppend(
          &out, "  current: ",
          FormatRun(status.current_run(), status.status_unix_seconds()), "\n");
    }
    for (const proto::RunStatus& run : status.recent_runs()) {
      absl::StrAppend(&out, "  ", FormatRun(run, 0), "\n");
    }
  }
  absl::StrAppend(&out, "last error: ", OneLine(status.last_error()), "\n");
  return out;
}

}  // namespace coordinator
}  // namespace starling
