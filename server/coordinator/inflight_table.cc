#include "server/coordinator/inflight_table.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace starling {
namespace coordinator {
namespace {

std::string Seconds(double s) {
  if (s < 1e-3) return absl::StrFormat("%.0f us", s * 1e6);
  if (s < 1) return absl::StrFormat("%.1f ms", s * 1e3);
  return absl::StrFormat("%.1f s", s);
}

std::string Ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

// "allreduce op 12 (allreduce of 1000 float32 (sum, butterfly))".
std::string OpName(const proto::CollectiveOp& op) {
  return absl::StrCat(op.op(), " op ", op.seq(), " (", op.fingerprint(), ")");
}

// "worker 1 'train.py' (pid 42)".
std::string WorkerName(const proto::WorkerStatus& w) {
  return absl::StrCat("worker ", w.index(), " '", w.name(), "' (pid ", w.pid(),
                      ")");
}

// Why a daemon outside the collective has not entered it: the local
// workers it still waits for, in a few words ("" if it waits for none).
std::string LocalWait(const proto::LocalRounds& local) {
  std::vector<std::string> sent, silent;
  for (const proto::LocalWorkerRound& w : local.workers()) {
    if (w.worker().state() == proto::WorkerStatus::STATE_FINISHED) continue;
    if (w.queued() > 0) {
      sent.push_back(absl::StrCat(WorkerName(w.worker()), " sent ",
                                  w.oldest_queued(), " ",
                                  Seconds(w.oldest_queued_seconds()), " ago"));
      continue;
    }
    std::string state;
    if (w.worker().state() == proto::WorkerStatus::STATE_MISSING) {
      state = absl::StrCat(
          ", MISSING for ", Seconds(w.worker().missing_seconds()),
          ", grace left ", Seconds(w.worker().grace_left_seconds()));
    }
    silent.push_back(absl::StrCat(WorkerName(w.worker()), state));
  }
  if (silent.empty()) return "";
  std::string out =
      absl::StrCat("; it waits for its local ", absl::StrJoin(silent, ", "),
                   ", which sent nothing");
  if (local.last_round_ended_seconds() >= 0) {
    absl::StrAppend(&out, " since its last round (", local.last_round(),
                    ") ended ", Seconds(local.last_round_ended_seconds()),
                    " ago");
  }
  if (!sent.empty()) {
    absl::StrAppend(&out, " (", absl::StrJoin(sent, "; "), ")");
  }
  return out;
}

// What one node does, in a few words, for the "who is missing" lines.
std::string Doing(const NodeCollectives& node) {
  if (!node.reply.ok()) {
    return absl::StrCat("its admin service at ", node.admin_address,
                        " did not answer: ", node.reply.status().message());
  }
  const proto::CollectivesReply& r = *node.reply;
  if (r.in_flight_size() > 0) {
    return absl::StrCat("is in ", OpName(r.in_flight(0)), " for ",
                        Seconds(r.in_flight(0).seconds()));
  }
  std::string out = "is in no collective";
  if (r.recent_size() > 0) {
    const proto::CollectiveOp& last = r.recent(0);
    const double ago =
        (r.now_unix_micros() - last.start_unix_micros()) / 1e6 - last.seconds();
    absl::StrAppend(&out, "; its last was op ", last.seq(), ", ended ",
                    Seconds(std::max(0.0, ago)), " ago",
                    last.error().empty() ? "" : " with an error");
  } else {
    absl::StrAppend(&out, " (none run yet)");
  }
  return absl::StrCat(out, LocalWait(r.local()));
}

}  // namespace

std::string FormatInFlightTable(const proto::JobStatus& job,
                                const std::vector<NodeCollectives>& nodes) {
  std::string out =
      absl::StrCat("job ", job.job_id(), ": group of ", job.group_size(), ", ",
                   job.healthy_nodes(), " healthy\n\n");
  size_t host_width = 4;
  for (const NodeCollectives& n : nodes) {
    host_width = std::max(host_width, n.hostname.size());
  }
  absl::StrAppend(&out,
                  absl::StrFormat("%-5s %-*s %s\n", "rank", host_width, "host",
                                  "collective (in flight, or the last one)"));
  // Ops some rank waits in: seq -> (op, waiting ranks, missing ranks).
  struct Waiting {
    proto::CollectiveOp op;
    std::vector<int> waiting;
    std::set<int> missing;
    double longest = 0;
  };
  std::map<uint64_t, Waiting> waits;
  std::map<int, const NodeCollectives*> by_rank;
  for (const NodeCollectives& n : nodes) {
    by_rank[n.rank] = &n;
    std::string what;
    if (!n.reply.ok()) {
      what = absl::StrCat("UNREACHABLE: ", n.admin_address, ": ",
                          n.reply.status().message());
    } else if (n.reply->in_flight_size() > 0) {
      for (const proto::CollectiveOp& op : n.reply->in_flight()) {
        const std::vector<int> missing(op.missing_ranks().begin(),
                                       op.missing_ranks().end());
        absl::StrAppend(&what, what.empty() ? "" : "; ", OpName(op),
                        " in flight for ", Seconds(op.seconds()),
                        missing.empty()
                            ? std::string(", every rank arrived")
                            : absl::StrCat(", waiting for ", Ranks(missing)));
        Waiting& w = waits[op.seq()];
        w.op = op;
        w.waiting.push_back(n.rank);
        w.missing.insert(missing.begin(), missing.end());
        w.longest = std::max(w.longest, op.seconds());
      }
    } else if (n.reply->recent_size() > 0) {
      const proto::CollectiveOp& last = n.reply->recent(0);
      what = absl::StrCat(
          "- (last: ", OpName(last), ", took ", Seconds(last.seconds()),
          last.last_rank() >= 0
              ? absl::StrCat(", rank ", last.last_rank(), " arrived last")
              : std::string(),
          last.error().empty() ? std::string()
                               : absl::StrCat(", failed: ", last.error()),
          ")");
    } else {
      what = "- (no collective yet)";
    }
    absl::StrAppend(&out, absl::StrFormat("%-5d %-*s %s\n", n.rank, host_width,
                                          n.hostname, what));
  }
  if (waits.empty()) {
    absl::StrAppend(&out, "\nno collective is waiting for anyone\n");
    return out;
  }
  absl::StrAppend(&out, "\nwho is missing:\n");
  for (const auto& [seq, w] : waits) {
    std::vector<int> missing(w.missing.begin(), w.missing.end());
    if (missing.empty()) {
      absl::StrAppend(&out, "  ", OpName(w.op), ": every rank arrived; ",
                      Ranks(w.waiting), " still exchanging data (",
                      Seconds(w.longest), ")\n");
      continue;
    }
    absl::StrAppend(&out, "  ", OpName(w.op), " waits for ", Ranks(missing),
                    " (", Ranks(w.waiting), " in it for up to ",
                    Seconds(w.longest), "):\n");
    for (int r : missing) {
      auto it = by_rank.find(r);
      absl::StrAppend(&out, "    rank ", r, " ",
                      it == by_rank.end()
                          ? std::string("is not in the coordinator's group")
                          : absl::StrCat("(", it->second->hostname, ") ",
                                         Doing(*it->second)),
                      "\n");
    }
  }
  return out;
}

}  // namespace coordinator
}  // namespace starling
