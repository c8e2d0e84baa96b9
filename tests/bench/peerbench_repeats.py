#!/usr/bin/env python3
"""Combines repeated peerbench runs (tests/bench/run_peerbench.sh --repeat K)
so that a 5% claim can be told from noise.

Each run measured every (peer, algorithm, N, S, rate) once, every peer in
turn, so the runs interleave the peers. For each configuration the combined
row's median_s is the median of the runs' medians (of the slowest rank),
beside the lowest and highest of them (median_lo_s, median_hi_s), their
spread ((hi - lo) / median) and the number of runs; the other figures are
the medians of the runs'. The columns start with peerbench's own, so
../shared/peerbench/summarize.py reads the combined file too.

    peerbench_repeats.py OUT.csv RUN1.csv [RUN2.csv ...]

Prints, per rate, N and S: Starling's auto against the best algorithm
Starling has forced by name (auto must not be slower beyond the noise),
and the best peer (Gloo or Open MPI) and Starling's
auto, each median with its range over the runs and its CPU use, their
ratio, and a verdict: "ahead" or "behind" only where the two ranges do not
overlap, "within noise" where they do.
"""
import csv
import statistics
import sys
from collections import defaultdict

KEY = ("peer", "algorithm", "N", "S", "rate", "delay")
MEDIANS = ("algbw", "busbw", "rank0_median_s", "min_s", "cpu_util")
EXTRA = ("runs", "median_lo_s", "median_hi_s", "spread")


def combine(runs):
    """runs: a list of runs, each a list of peerbench rows (dicts of str).
    Returns (columns, rows): one combined row per configuration, in the
    order configurations first appear."""
    columns = []
    groups = defaultdict(list)
    order = []
    for rows in runs:
        for r in rows:
            for c in r:
                if c not in columns:
                    columns.append(c)
            key = tuple(r.get(k, "") for k in KEY)
            if key not in groups:
                order.append(key)
            groups[key].append(r)
    out = []
    for key in order:
        rs = groups[key]
        ok = [r for r in rs if r.get("ok") == "1"]
        row = dict(rs[0])
        row["ok"] = "1" if ok and len(ok) == len(rs) else "0"
        use = ok or rs
        medians = [float(r["median_s"]) for r in use]
        m = statistics.median(medians)
        row["median_s"] = "%.6g" % m
        for c in MEDIANS:
            vals = [float(r[c]) for r in use if r.get(c) not in (None, "", "-")]
            if vals:
                row[c] = "%.6g" % statistics.median(vals)
        bound = float(row.get("lower_bound_s") or 0)
        row["ratio_to_bound"] = "%.3f" % (m / bound) if bound > 0 else ""
        row["iters"] = str(sum(int(r.get("iters") or 0) for r in use))
        row["runs"] = str(len(use))
        row["median_lo_s"] = "%.6g" % min(medians)
        row["median_hi_s"] = "%.6g" % max(medians)
        row["spread"] = "%.3f" % ((max(medians) - min(medians)) / m if m > 0 else 0)
        out.append(row)
    return columns + [c for c in EXTRA if c not in columns], out


def verdict(starling, peer):
    """'ahead', 'behind' or 'within noise' from the two rows' ranges."""
    s_lo, s_hi = float(starling["median_lo_s"]), float(starling["median_hi_s"])
    p_lo, p_hi = float(peer["median_lo_s"]), float(peer["median_hi_s"])
    if s_hi < p_lo:
        return "ahead"
    if s_lo > p_hi:
        return "behind"
    return "within noise"


def fmt(row):
    m = float(row["median_s"])
    lo, hi = float(row["median_lo_s"]), float(row["median_hi_s"])
    if m < 1:
        return "%.3f ms (%.3f-%.3f)" % (m * 1e3, lo * 1e3, hi * 1e3)
    return "%.3f s (%.3f-%.3f)" % (m, lo, hi)


def table(rows):
    """The comparison, as markdown lines."""
    groups = defaultdict(list)
    for r in rows:
        if r["ok"] == "1":
            groups[(r["rate"], int(r["N"]), int(r["S"]))].append(r)
    lines = [
        "| rate | N | S | best peer | median (lo-hi) | cpu | Starling auto | median (lo-hi) | cpu | auto / best peer | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (rate, n, s), rs in sorted(groups.items()):
        peers = [r for r in rs if r["peer"] != "starling"]
        auto = [r for r in rs if r["peer"] == "starling"
                and r["algorithm"].split(":")[0] == "auto"]
        if not auto:
            auto = [r for r in rs if r["peer"] == "starling"]
        if not peers or not auto:
            continue
        best = min(peers, key=lambda r: float(r["median_s"]))
        a = min(auto, key=lambda r: float(r["median_s"]))
        ratio = float(a["median_s"]) / float(best["median_s"])
        lines.append("| %s | %d | %.0e | %s/%s | %s | %s | %s | %s | %s | %.2f | %s |" % (
            rate, n, s, best["peer"], best["algorithm"], fmt(best),
            best.get("cpu_util", "-"), a["algorithm"], fmt(a),
            a.get("cpu_util", "-"), ratio, verdict(a, best)))
    return lines


def auto_table(rows):
    """Starling's auto against the best algorithm Starling has, forced by
    name, as markdown lines: auto must not be slower beyond the noise."""
    groups = defaultdict(list)
    for r in rows:
        if r["ok"] == "1" and r["peer"] == "starling":
            groups[(r["rate"], int(r["N"]), int(r["S"]))].append(r)
    lines = [
        "| rate | N | S | auto | median (lo-hi) | best named | median (lo-hi) | auto / best | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (rate, n, s), rs in sorted(groups.items()):
        auto = [r for r in rs if r["algorithm"].split(":")[0] == "auto"]
        named = [r for r in rs if r["algorithm"].split(":")[0] != "auto"]
        if not auto or not named:
            continue
        a = auto[0]
        best = min(named, key=lambda r: float(r["median_s"]))
        lines.append("| %s | %d | %.0e | %s | %s | %s | %s | %.2f | %s |" % (
            rate, n, s, a["algorithm"], fmt(a), best["algorithm"], fmt(best),
            float(a["median_s"]) / float(best["median_s"]),
            "its choice" if a["algorithm"].endswith(":" + best["algorithm"])
            else verdict(a, best)))
    return lines


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    runs = []
    for path in argv[2:]:
        with open(path) as f:
            runs.append(list(csv.DictReader(f)))
    columns, rows = combine(runs)
    with open(argv[1], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print("\n".join(table(rows)))
    print()
    print("\n".join(auto_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
