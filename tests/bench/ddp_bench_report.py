"""The table of tests/bench/ddp_bench.sh from its workers' JSON files
(ddp_bench_worker.py writes one per worker and run).

    ddp_bench_report.py --brief RUN.*.json          # one line for one run
    ddp_bench_report.py --other RUN.*.json          # its other_busy
    ddp_bench_report.py --csv OUT.csv [--context TEXT] DIR/*.json

Per run (model, mode, repetition):
  step_ms     median of the timed steps' durations, every worker's steps
              pooled, with the 10th and 90th percentiles (a worker's step
              ends when its all-reduces are done, so the workers of a
              synchronous job take the same time per step on average; the
              per-step maximum over the workers would add their jitter)
  mean_ms     the slowest worker's timed seconds / steps (throughput)
  tx, rx      bytes per step each host's nic sent and received (mean over
              the hosts; for starling and dopt the daemon's traffic, which
              shares the host's namespace), and the daemon's
              starling_transport_sent_bytes_total per step
  tx/grad     tx per step / the gradient's bytes (sum of numel x 4): a
              bandwidth-optimal all-reduce sends 2(N-1)/N of it, plus the
              TCP/IP headers (~3.5% at MTU 1500)
  identical   every worker ended with the same parameters (sum over them,
              in float64); "-" for local, which exchanges nothing
  vs_gloo, vs_dopt   step_ms / the same repetition's gloo, dopt step_ms
  worker_cpu_ms, daemon_cpu_ms   CPU per step and host of the worker (every
              thread: Gloo's network threads are the worker's) and of its
              daemon (starling, dopt), over the timed steps
  machine_busy   the machine's busy fraction (every core, every process:
              /proc/stat) over the timed steps
  other_busy  the part of machine_busy that the workers and daemons were
              not charged for: other people's processes on the shared
              machine, and the kernel's network work done outside the
              bench's processes (softirq, ksoftirqd); ddp_bench.sh repeats
              a run whose other_busy exceeds its --max-other
  busy_before   the machine's busy fraction in the 2 s before the run
  trace_*     with ddp_bench.sh --trace: the DDP bucket trace (see
              summarize_trace)
  daemon_allreduce_ms, daemon_allreduces_per_step, daemon_algorithms
              starling and dopt: the daemon's all-reduces per step, their
              time (starling_node_allreduce_seconds) and the algorithms
              its starling_collective_duration_seconds names
Per (model, mode), a summary row (rep "median"): the medians over the
repetitions, with the smallest and largest repetition median (spread), and
vs_gloo, vs_dopt as ratios of the medians.
"""

import argparse
import collections
import csv
import json
import os
import statistics
import sys

MODES = ("gloo", "starling", "dopt", "local")


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summarize_run(workers):
    """One run's row from its workers' results (a list of dicts)."""
    first = workers[0]
    pooled = [t for w in workers for t in w["step_ms"]]
    per_step = [w["steps"] for w in workers]
    sent = [w["daemon_sent_bytes"] for w in workers]
    checks = {w["checksum"] for w in workers}
    row = {
        "model": first["model"], "mode": first["mode"],
        "hosts": first["world"], "workers_reported": len(workers),
        "batch": first["batch"], "steps": first["steps"],
        "parameters": first["parameters"],
        "gradient_bytes": first["gradient_bytes"],
        "step_ms": statistics.median(pooled),
        "step_ms_p10": percentile(pooled, 0.1),
        "step_ms_p90": percentile(pooled, 0.9),
        "mean_ms": max(1000 * w["wall_s"] / w["steps"] for w in workers),
        "tx_bytes_per_step": statistics.mean(
            w["tx_bytes"] / s for w, s in zip(workers, per_step)),
        "rx_bytes_per_step": statistics.mean(
            w["rx_bytes"] / s for w, s in zip(workers, per_step)),
        "daemon_sent_bytes_per_step": (
            statistics.mean(b / s for b, s in zip(sent, per_step))
            if all(b is not None for b in sent) else None),
        "identical": ("-" if first["mode"] == "local" else
                      "yes" if len(checks) == 1 else "NO"),
        "loss_first": statistics.mean(w["loss_first"] for w in workers),
        "loss_last": statistics.mean(w["loss_last"] for w in workers),
        "origin": first["origin"],
    }
    row["tx_per_gradient_byte"] = row["tx_bytes_per_step"] / row["gradient_bytes"]
    # CPU per step and host; the machine's share that the bench's own
    # processes do not account for.
    row["worker_cpu_ms"] = statistics.mean(
        1000 * w["worker_cpu_s"] / w["steps"] for w in workers)
    daemon = [w["daemon_cpu_s"] for w in workers]
    row["daemon_cpu_ms"] = (statistics.mean(1000 * d / first["steps"] for d in daemon)
                            if all(d is not None for d in daemon) else None)
    ours = sum(w["worker_cpu_s"] + (w["daemon_cpu_s"] or 0) for w in workers)
    zero = min(workers, key=lambda w: w["rank"])
    row.update(summarize_trace(workers))
    metrics = [w.get("daemon_metrics") for w in workers]
    if all(m is not None for m in metrics):
        row["daemon_allreduce_ms"] = statistics.mean(
            1000 * m.get("allreduce_s", 0.0) / first["steps"] for m in metrics)
        row["daemon_allreduces_per_step"] = statistics.mean(
            m.get("allreduces", 0.0) / first["steps"] for m in metrics)
        row["daemon_algorithms"] = "+".join(sorted({
            k.split("/", 1)[1] for m in metrics for k, v in m.items()
            if k.startswith("collectives/") and v > 0}))
    row["machine_busy"] = zero["machine_busy_s"] / zero["machine_total_s"]
    row["other_busy"] = max(0.0, zero["machine_busy_s"] - ours) / zero["machine_total_s"]
    return row


def summarize_trace(workers):
    """The DDP bucket trace (ddp_bench_worker.py --trace_buckets), medians
    over every worker's timed steps: buckets per step; comm_span_ms, from
    the first bucket's launch to the last one's completion; idle_ms, the
    parts of that span with no all-reduce in flight (the next bucket not
    yet launched); tail_ms, from the last bucket's launch to its completion
    (communication left after backward launched it); backward_ms, the
    step's start to backward()'s return (compute and the wait for the
    buckets); active_ms, span - idle (some all-reduce in flight);
    busbw_mb_s, 2(N-1)/N x the step's bucket bytes / active, the bus
    bandwidth while some all-reduce was in flight. For the starling
    backend, the report sets beside it the daemons' own all-reduce time
    per step (starling_node_allreduce_seconds): in flight minus that is
    the backend's time outside the daemons' collectives (staging copies,
    hand-offs, the wait for the previous bucket's)."""
    steps = [(w["world"], s) for w in workers for s in (w.get("bucket_trace") or [])
             if s["buckets"] and all(b[2] is not None for b in s["buckets"])]
    if not steps:
        return {}
    counts, spans, idles, tails, backwards, busbws = [], [], [], [], [], []
    actives = []
    for world, step in steps:
        buckets = sorted(step["buckets"], key=lambda b: b[1])
        idle, done = 0.0, buckets[0][1]
        for _, launch, finish in buckets:
            idle += max(0.0, launch - done)
            done = max(done, finish)
        span = done - buckets[0][1]
        counts.append(len(buckets))
        spans.append(span)
        idles.append(idle)
        tails.append(done - buckets[-1][1])
        if "backward_done_ms" in step:
            backwards.append(step["backward_done_ms"])
        active = span - idle
        actives.append(active)
        if active > 0:
            bus = 2.0 * (world - 1) / world * sum(b[0] for b in buckets)
            busbws.append(bus / 1e6 / (active / 1000))
    median = statistics.median
    return {
        "trace_buckets": median(counts), "trace_comm_span_ms": median(spans),
        "trace_idle_ms": median(idles), "trace_tail_ms": median(tails),
        "trace_active_ms": median(actives),
        "trace_backward_ms": median(backwards) if backwards else None,
        "trace_busbw_mb_s": median(busbws) if busbws else None,
    }


def load(paths):
    """({(model, mode, rep): [worker results]}, {(model, mode, rep): (busy
    before, busy during)}): a file's name is MODEL.MODE.REP.RANK.json, and
    ddp_bench.sh writes the machine's busy fractions beside it in
    MODEL.MODE.REP.machine."""
    runs = collections.defaultdict(list)
    machine = {}
    for path in paths:
        folder, name = os.path.split(path)
        key = tuple(name.split(".")[:3])
        with open(path) as f:
            runs[key].append(json.load(f))
        if key not in machine:
            try:
                with open(os.path.join(folder, "%s.%s.%s.machine" % key)) as f:
                    before, attempts = f.read().split()
                    machine[key] = (float(before), int(attempts))
            except (OSError, ValueError):
                machine[key] = (None, None)
    return runs, machine


def mb(value):
    return "-" if value is None else "%.3f" % (value / 1e6)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--brief", action="store_true")
    parser.add_argument("--other", action="store_true",
                        help="print the largest other_busy of the runs given")
    parser.add_argument("--csv")
    parser.add_argument("--context", default="")
    parser.add_argument("--max_other", type=float, default=None,
                        help="mark runs whose other_busy exceeds it")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    loaded, machine = load(args.files)
    runs = {key: summarize_run(workers) for key, workers in loaded.items()}
    for (model, mode, rep), row in runs.items():
        row["rep"] = rep
        row["busy_before"], row["attempts"] = machine[(model, mode, rep)]
        for base in ("gloo", "dopt"):
            other = runs.get((model, base, rep))
            row["vs_" + base] = (row["step_ms"] / other["step_ms"]
                                 if other and mode != base else None)
    if args.other:
        print("%.3f" % max(row["other_busy"] for row in runs.values()))
        return
    if args.brief:
        for row in runs.values():
            print("   %s %s: step %.2f ms (p10 %.2f, p90 %.2f), mean %.2f ms, "
                  "nic sent %s MB/step (%.3f x the gradient's %s MB), "
                  "parameters identical: %s; CPU ms/step/host: worker %.1f, "
                  "daemon %s; machine busy %.2f, not the bench's %.2f" % (
                      row["model"], row["mode"], row["step_ms"],
                      row["step_ms_p10"], row["step_ms_p90"], row["mean_ms"],
                      mb(row["tx_bytes_per_step"]), row["tx_per_gradient_byte"],
                      mb(row["gradient_bytes"]), row["identical"],
                      row["worker_cpu_ms"],
                      "-" if row["daemon_cpu_ms"] is None else "%.1f" % row["daemon_cpu_ms"],
                      row["machine_busy"], row["other_busy"]))
        return

    by_config = collections.defaultdict(list)
    for (model, mode, _), row in sorted(runs.items()):
        by_config[(model, mode)].append(row)
    summary = {}
    for (model, mode), rows in by_config.items():
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("step_ms", "step_ms_p10", "step_ms_p90", "mean_ms",
                         "tx_bytes_per_step", "rx_bytes_per_step",
                         "tx_per_gradient_byte", "loss_last", "worker_cpu_ms",
                         "machine_busy", "other_busy")}
        for k in ("daemon_sent_bytes_per_step", "daemon_cpu_ms"):
            values = [r[k] for r in rows]
            med[k] = (statistics.median(values)
                      if all(v is not None for v in values) else None)
        med["attempts"] = sum(r["attempts"] or 1 for r in rows)
        med.update({k: rows[0][k] for k in ("model", "mode", "hosts", "batch", "steps",
                                             "parameters", "gradient_bytes", "origin")})
        med["rep"] = "median"
        med["reps"] = len(rows)
        med["rep_min_ms"] = min(r["step_ms"] for r in rows)
        med["rep_max_ms"] = max(r["step_ms"] for r in rows)
        med["identical"] = ("-" if mode == "local" else
                            "yes" if all(r["identical"] == "yes" for r in rows) else "NO")
        med["workers_reported"] = min(r["workers_reported"] for r in rows)
        summary[(model, mode)] = med
    for (model, mode), med in summary.items():
        for base in ("gloo", "dopt"):
            other = summary.get((model, base))
            med["vs_" + base] = (med["step_ms"] / other["step_ms"]
                                 if other and mode != base else None)

    columns = ["model", "mode", "rep", "hosts", "batch", "steps", "parameters",
               "gradient_bytes", "step_ms", "step_ms_p10", "step_ms_p90",
               "mean_ms", "rep_min_ms", "rep_max_ms", "tx_bytes_per_step",
               "rx_bytes_per_step", "daemon_sent_bytes_per_step",
               "tx_per_gradient_byte", "vs_gloo", "vs_dopt", "identical",
               "worker_cpu_ms", "daemon_cpu_ms", "machine_busy", "other_busy",
               "trace_buckets", "trace_comm_span_ms", "trace_idle_ms",
               "trace_tail_ms", "trace_backward_ms", "trace_busbw_mb_s",
               "trace_active_ms", "daemon_allreduce_ms",
               "daemon_allreduces_per_step", "daemon_algorithms",
               "busy_before", "attempts", "loss_last", "workers_reported",
               "context"]

    def cell(value):
        if value is None:
            return ""
        if isinstance(value, float):
            return "%.0f" % value if abs(value) >= 1000 else "%.4f" % value
        return value

    order = {m: i for i, m in enumerate(MODES)}
    key = (lambda r: (r["model"], order[r["mode"]], r["rep"]))
    all_rows = sorted(runs.values(), key=key) + sorted(summary.values(), key=key)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            for row in all_rows:
                row["context"] = args.context
                writer.writerow([cell(row.get(c)) for c in columns])
        print("wrote %s" % args.csv)

    print()
    print("Per run (step ms: median of every worker's timed steps; busy: the "
          "machine's busy fraction / the part not the bench's, over the "
          "timed steps):")
    print("%-8s %-8s %3s %9s %9s %9s %10s %9s %8s %8s %5s %9s" % (
        "model", "mode", "rep", "step_ms", "p10", "p90", "nic_MB/st", "tx/grad",
        "vs_gloo", "vs_dopt", "same", "busy"))
    for row in sorted(runs.values(), key=key):
        busy = "%.2f/%.2f" % (row["machine_busy"], row["other_busy"])
        print("%-8s %-8s %3s %9.2f %9.2f %9.2f %10s %9.3f %8s %8s %5s %9s" % (
            row["model"], row["mode"], row["rep"], row["step_ms"],
            row["step_ms_p10"], row["step_ms_p90"], mb(row["tx_bytes_per_step"]),
            row["tx_per_gradient_byte"],
            "-" if row["vs_gloo"] is None else "%.3f" % row["vs_gloo"],
            "-" if row["vs_dopt"] is None else "%.3f" % row["vs_dopt"],
            row["identical"], busy))
    print()
    print("Summary (%s; medians over the repetitions):" % (args.context or "-"))
    print()
    print("| model | mode | reps | step ms (median) | spread over reps (min .. max) "
          "| mean ms | gradient MB/step | nic sent MB/step/host | sent / gradient "
          "| daemon sent MB/step | CPU ms/step/host (worker + daemon) "
          "| starling/gloo | starling/dopt | same params |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for med in sorted(summary.values(), key=key):
        ratio_gloo = med["vs_gloo"] if med["mode"] == "starling" else None
        ratio_dopt = med["vs_dopt"] if med["mode"] == "starling" else None
        print("| %s | %s | %d | %.2f | %.2f .. %.2f (%+.0f%% .. %+.0f%%) | %.2f | %s | %s "
              "| %.3f | %s | %s | %s | %s | %s |" % (
                  med["model"], med["mode"], med["reps"], med["step_ms"],
                  med["rep_min_ms"], med["rep_max_ms"],
                  100 * (med["rep_min_ms"] / med["step_ms"] - 1),
                  100 * (med["rep_max_ms"] / med["step_ms"] - 1),
                  med["mean_ms"], mb(med["gradient_bytes"]),
                  mb(med["tx_bytes_per_step"]), med["tx_per_gradient_byte"],
                  mb(med["daemon_sent_bytes_per_step"]),
                  "%.0f" % med["worker_cpu_ms"] if med["daemon_cpu_ms"] is None else
                  "%.0f + %.0f" % (med["worker_cpu_ms"], med["daemon_cpu_ms"]),
                  "-" if ratio_gloo is None else "**%.3f**" % ratio_gloo,
                  "-" if ratio_dopt is None else "**%.3f**" % ratio_dopt,
                  med["identical"]))
    if args.max_other is not None:
        noisy = [r for r in runs.values() if r["other_busy"] > args.max_other]
        print()
        if noisy:
            print("Runs where other processes took more than %.2f of the machine "
                  "(after their retries): %s." % (args.max_other, ", ".join(
                      "%s %s rep %s (%.2f)" % (r["model"], r["mode"], r["rep"],
                                               r["other_busy"])
                      for r in sorted(noisy, key=key))))
        else:
            print("No run had other processes take more than %.2f of the machine "
                  "during its timed steps." % args.max_other)
        retried = [r for r in runs.values() if (r["attempts"] or 1) > 1]
        if retried:
            print("Runs repeated for that: %s." % ", ".join(
                "%s %s rep %s (%d attempts)" % (r["model"], r["mode"], r["rep"],
                                                r["attempts"])
                for r in sorted(retried, key=key)))
    traced = [r for r in sorted(runs.values(), key=key) if "trace_buckets" in r]
    if traced:
        print()
        print("DDP bucket trace (medians over every worker's timed steps; ms "
              "since the step began; busbw: while an all-reduce was in flight):")
        print()
        print("| model | mode | rep | step ms | buckets | comm span ms | idle in span ms "
              "| in flight ms | daemons' all-reduce ms (algorithm) "
              "| tail ms (last launch to done) | backward ms | busbw MB/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in traced:
            daemon = ("-" if r.get("daemon_allreduce_ms") is None else "%.1f (%s)" % (
                r["daemon_allreduce_ms"], r["daemon_algorithms"] or "-"))
            print("| %s | %s | %s | %.1f | %d | %.1f | %.1f | %.1f | %s | %.1f | %s | %s |" % (
                r["model"], r["mode"], r["rep"], r["step_ms"], r["trace_buckets"],
                r["trace_comm_span_ms"], r["trace_idle_ms"], r["trace_active_ms"],
                daemon, r["trace_tail_ms"],
                "-" if r["trace_backward_ms"] is None else "%.1f" % r["trace_backward_ms"],
                "-" if r["trace_busbw_mb_s"] is None else "%.1f" % r["trace_busbw_mb_s"]))
    origins = sorted({med["origin"] for med in summary.values()})
    print()
    print("Models: %s." % "; ".join(origins))
    if any(med["identical"] == "NO" for med in summary.values()):
        print("WARNING: some run's workers ended with different parameters",
              file=sys.stderr)


if __name__ == "__main__":
    main()
