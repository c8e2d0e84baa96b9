#!/usr/bin/python3
"""Queries a Prometheus server for every panel of a Grafana dashboard and
writes the results for render.html (dashboards/render/render.sh).

  render_data.py --prometheus URL --dashboard dashboards/training.json \
      --start UNIX --end UNIX [--step 2] [--ranks ranks.json] \
      [--subtitle TEXT] --out data.js

For each panel (Grafana gridPos order) and each of its targets, runs
/api/v1/query_range with the dashboard's variables replaced ($job and
$instance: all; $__rate_interval: 4 x the step, at least 10s), renders the
target's legendFormat with the series' labels and names node instances by
rank (--ranks: {"host:port": {"rank": R, "hostname": H}}, else
starling_node_rank when exported). Writes `window.STARLING_DASHBOARD = {...};`
(JSON) to --out, and prints the page height in pixels that render.html will
need.
"""

import argparse
import json
import math
import re
import sys
import urllib.parse
import urllib.request

# Chart layout (render.html uses the same numbers).
CHART_HEIGHT = 340
HEADER_HEIGHT = 195
ROW_GAP = 16
COLUMNS = 2
PAGE_PADDING = 2 * 18 + 4


def api(url, path, params):
    full = f"{url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(full, timeout=20) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('error')}")
    return body["data"]


def substitute(expr, rate_interval, interval):
    expr = expr.replace("$__rate_interval", rate_interval)
    expr = expr.replace("${__rate_interval}", rate_interval)
    expr = expr.replace("$__interval", interval)
    expr = expr.replace("${__interval}", interval)
    # Every other variable ($job, ${instance}, [[var]]): match everything.
    expr = re.sub(r'=~\s*"\$\{?\w+(:\w+)?\}?"', '=~".*"', expr)
    expr = re.sub(r'=\s*"\$\{?\w+(:\w+)?\}?"', '=~".*"', expr)
    return expr


def legend(fmt, labels, ranks):
    def label(name):
        value = labels.get(name, "")
        if name == "instance" and value in ranks:
            return ranks[value]
        return value
    if not fmt or fmt == "__auto":
        inner = ",".join(f"{k}={label(k)}" for k in sorted(labels)
                         if k != "__name__")
        return inner or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: label(m.group(1)), fmt)


def rank_names(url, ranks_file, end):
    names = {}
    if ranks_file:
        with open(ranks_file) as f:
            for instance, info in json.load(f).items():
                names[instance] = f"rank {info['rank']}"
        return names
    try:
        data = api(url, "/api/v1/query",
                   {"query": "starling_node_rank", "time": end})
        for r in data["result"]:
            names[r["metric"].get("instance")] = \
                f"rank {int(float(r['value'][1]))}"
    except Exception:
        pass
    return names


def panels_in_order(dashboard):
    out = []

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))  # collapsed rows hold their panels
            out.append(p)
    walk(dashboard.get("panels", []))
    out = [p for p in out if p.get("type") != "row"]
    out.sort(key=lambda p: (p.get("gridPos", {}).get("y", 0),
                            p.get("gridPos", {}).get("x", 0)))
    return out


def number(v):
    x = float(v)
    return x if math.isfinite(x) else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prometheus", required=True)
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--end", type=float, required=True)
    ap.add_argument("--step", type=float, default=2)
    ap.add_argument("--ranks")
    ap.add_argument("--subtitle", default="")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(args.dashboard) as f:
        dashboard = json.load(f)
    rate_interval = f"{max(10, int(4 * args.step))}s"
    interval = f"{max(1, int(args.step))}s"
    ranks = rank_names(args.prometheus, args.ranks, args.end)
    start = math.floor(args.start)
    step = args.step
    n = int((args.end - start) // step) + 1
    xs = [start + i * step for i in range(n)]

    stats, charts, missing = [], [], []
    for panel in panels_in_order(dashboard):
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        entry = {
            "title": panel.get("title", ""),
            "description": panel.get("description", ""),
            "unit": defaults.get("unit", "none"),
            "min": defaults.get("min"),
            "max": defaults.get("max"),
            "series": [],
        }
        for target in panel.get("targets", []):
            if target.get("hide") or not target.get("expr"):
                continue
            expr = substitute(target["expr"], rate_interval, interval)
            try:
                data = api(args.prometheus, "/api/v1/query_range",
                           {"query": expr, "start": start, "end": args.end,
                            "step": step})
            except Exception as e:
                print(f"render_data: {entry['title']}: {expr}: {e}",
                      file=sys.stderr)
                continue
            results = []
            for r in data["result"]:
                ys = [None] * n
                for t, v in r["values"]:
                    i = int(round((float(t) - start) / step))
                    if 0 <= i < n:
                        ys[i] = number(v)
                results.append({
                    "name": legend(target.get("legendFormat", ""),
                                   r["metric"], ranks),
                    "values": ys,
                })
            # Query order across targets, by name (rank 0, 1, ...) within one.
            entry["series"] += sorted(results, key=lambda x: x["name"])
        if not entry["series"]:
            missing.append(entry["title"])
        (stats if panel.get("type") == "stat" else charts).append(entry)

    # Drop the leading points where no panel has data yet (the first
    # scrapes, the rate windows filling).
    first = min((next((i for i, v in enumerate(s["values"]) if v is not None),
                      n) for c in charts + stats for s in c["series"]),
                default=0)
    first = min(first, n - 1)
    xs = xs[first:]
    for c in charts + stats:
        for s in c["series"]:
            s["values"] = s["values"][first:]

    out = {
        "title": dashboard.get("title", "dashboard"),
        "subtitle": args.subtitle,
        "x": xs,
        "stats": stats,
        "charts": charts,
        "layout": {"chartHeight": CHART_HEIGHT, "columns": COLUMNS,
                   "headerHeight": HEADER_HEIGHT, "gap": ROW_GAP},
    }
    with open(args.out, "w") as f:
        f.write("window.STARLING_DASHBOARD = ")
        json.dump(out, f)
        f.write(";\n")
    if missing:
        print("render_data: no data for: " + "; ".join(missing),
              file=sys.stderr)
    rows = (len(charts) + COLUMNS - 1) // COLUMNS
    print(PAGE_PADDING + HEADER_HEIGHT + rows * (CHART_HEIGHT + ROW_GAP)
          - ROW_GAP)


if __name__ == "__main__":
    main()
