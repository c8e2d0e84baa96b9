#!/usr/bin/env python3
"""Finds the algorithm crossovers in starling-bench CSV output.

    crossover.py sweep_n4.csv [sweep_n8.csv ...]

Reads the rows of `starling-bench --csv --algo all` runs (one file per group
size), prints for every size which algorithm had the lowest median and by
how much, and the sizes where the winner changes. These crossovers are what
SelectorOptions' thresholds (server/collective/selector.h) are set from.
"""
import csv
import sys
from collections import defaultdict


def main(paths):
    for path in paths:
        rows = []
        with open(path) as f:
            lines = [l for l in f if not l.startswith("#")]
        for r in csv.DictReader(lines):
            if r.get("op") is None or r["op"] == "op":
                continue
            rows.append(r)
        if not rows:
            print(f"{path}: no rows")
            continue
        by_size = defaultdict(dict)
        for r in rows:
            by_size[int(r["bytes"])][r["algorithm"]] = float(r["median_s"])
        ranks = rows[0]["ranks"]
        print(f"## {path}: {rows[0]['op']}, {ranks} ranks")
        algos = sorted({a for d in by_size.values() for a in d})
        print("| bytes | " + " | ".join(algos) + " | best | next best x |")
        print("|---" * (len(algos) + 3) + "|")
        previous = None
        changes = []
        for size in sorted(by_size):
            d = by_size[size]
            ranked = sorted(d.items(), key=lambda kv: kv[1])
            best = ranked[0][0]
            margin = ranked[1][1] / ranked[0][1] if len(ranked) > 1 else 1.0
            cells = [f"{d[a] * 1e6:.0f} us" if a in d else "-" for a in algos]
            print(f"| {size} | " + " | ".join(cells) + f" | {best} | {margin:.2f} |")
            if previous is not None and best != previous:
                changes.append((size, previous, best))
            previous = best
        for size, old, new in changes:
            print(f"crossover: {old} -> {new} at {size} bytes")
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1:])
