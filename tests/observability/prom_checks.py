#!/usr/bin/python3
"""Checks, through a live Prometheus server's HTTP API, what a Starling
cluster that trains tells its operator (tests/observability/prometheus_test.sh).

  prom_checks.py healthy URL RANKS COORD_INSTANCE NODE_INSTANCE... \
      [--rules] [--batch N] --scrapes SCRAPE_FILE...
  prom_checks.py lost URL INSTANCE

Every check polls /api/v1/query until it holds or its deadline passes (the
first samples appear a few seconds after Prometheus starts); none sleeps
blindly. Prints one PASS/SKIP/FAIL line per check; exits 1 on any FAIL.
The NEW metrics of the metrics contract are SKIPped, by name, while the
processes do not export them yet.
"""

import json
import math
import os
import sys
import time
import urllib.parse
import urllib.request

OPS = {"allreduce", "reducescatter", "allgather", "broadcast", "barrier",
       "shift"}
ALGORITHMS = {"butterfly", "ring", "tree", "reduce-broadcast", "none"}
SIZE_BUCKETS = {"0-4KiB", "4-64KiB", "64KiB-1MiB", "1-16MiB", "16-256MiB",
                "256MiB+"}

failures = []
# Deadlines are generous multiples of what an idle 2-core machine needs
# (a loaded CI host shares its cores with the 7 cluster processes).
SCALE = float(os.environ.get("PROM_CHECKS_TIMEOUT_SCALE", "2"))


def report(kind, what):
    print(f"{kind}: {what}", flush=True)
    if kind == "FAIL":
        failures.append(what)


def api(url, path, params=None):
    full = url + path
    if params:
        full += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(full, timeout=5) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body}")
    return body["data"]


def query(url, expr):
    """The instant vector of `expr` as [(labels dict, float value)]."""
    data = api(url, "/api/v1/query", {"query": expr})
    if data["resultType"] == "scalar":
        return [({}, float(data["result"][1]))]
    return [(r["metric"], float(r["value"][1])) for r in data["result"]]


def poll(url, what, expr, condition, timeout, describe=None):
    """Polls `expr` until condition(result) is true; PASS or FAIL `what`.
    Returns the last result."""
    timeout *= SCALE
    deadline = time.monotonic() + timeout
    result, error = [], None
    while True:
        try:
            result = query(url, expr)
            error = None
            if condition(result):
                detail = describe(result) if describe else ""
                report("PASS", what + (f" ({detail})" if detail else ""))
                return result
        except Exception as e:  # a transient HTTP error: keep polling
            error = e
        if time.monotonic() >= deadline:
            shown = error if error else format_result(result)
            report("FAIL", f"{what}: after {timeout:g} s, {expr} = {shown}")
            return result
        time.sleep(0.5)


def format_result(result, limit=12):
    parts = []
    for labels, value in result[:limit]:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())
                         if k != "__name__")
        parts.append(f"{{{inner}}} {value:g}")
    if len(result) > limit:
        parts.append(f"... {len(result) - limit} more")
    return "[" + "; ".join(parts) + "]" if parts else "[] (no series)"


def by_instance(result):
    return {labels.get("instance"): value for labels, value in result}


BATCH = 0  # --batch N: the workers' batch size (samples per step check)
EXPORTED = set()  # metric names in the raw scrapes (--scrapes FILE...)


def exists(url, metric):
    """True when the processes export `metric` (the contract's NEW metrics
    may be missing from this build): read from the raw scrapes the test saved,
    so that a missing metric costs no polling."""
    return metric in EXPORTED


def read_scrapes(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                if line and not line.startswith("#"):
                    EXPORTED.add(line.split("{")[0].split()[0])


def healthy(url, ranks, coord, nodes, rules):
    nodes = set(nodes)
    finite = math.isfinite

    # Targets: Prometheus scrapes every process.
    poll(url, f"every target up (coordinator + {ranks} nodes)",
         'up{job=~"starling-coordinator|starling-node"} == 1',
         lambda r: by_instance(r).keys() == nodes | {coord}, 20,
         lambda r: f"{len(r)} targets")
    poll(url, "group size: every node reports the full group",
         'starling_node_group_size{job="starling-node"}',
         lambda r: by_instance(r) == {n: ranks for n in nodes}, 15,
         lambda r: f"{ranks} on {len(r)} nodes")
    poll(url, "group size: the coordinator counts every node",
         'starling_coordinator_group_size{job="starling-coordinator"}',
         lambda r: [v for _, v in r] == [ranks], 15,
         lambda r: f"{r[0][1]:g}")
    poll(url, "a run is active on every node (starling_node_run_id > 0)",
         'starling_node_run_id{job="starling-node"} > 0',
         lambda r: by_instance(r).keys() == nodes, 15,
         lambda r: f"run {max(v for _, v in r):g}")

    # Progress: every node's step counter grows between two Prometheus reads.
    first = poll(url, "every node has completed steps",
                 'starling_node_steps_total{job="starling-node"} > 0',
                 lambda r: by_instance(r).keys() == nodes, 20,
                 lambda r: ", ".join(f"{i}: {v:g}" for i, v in
                                     sorted(by_instance(r).items())))
    before = by_instance(first)
    poll(url, "starling_node_steps_total increases on every node",
         'starling_node_steps_total{job="starling-node"}',
         lambda r: all(by_instance(r).get(n, 0) > before.get(n, math.inf)
                       for n in nodes), 20,
         lambda r: ", ".join(f"+{by_instance(r)[n] - before[n]:g}"
                             for n in sorted(nodes)))
    poll(url, "step rate > 0 on every node",
         'rate(starling_node_steps_total{job="starling-node"}[5s]) > 0',
         lambda r: by_instance(r).keys() == nodes, 20,
         lambda r: ", ".join(f"{v:.0f}/s" for _, v in r))

    # Step time histogram: samples, and a finite median per node.
    poll(url, "step time histogram has samples on every node",
         'starling_node_step_seconds_count{job="starling-node"} > 0',
         lambda r: by_instance(r).keys() == nodes, 15)
    poll(url, "median step time is finite and positive on every node",
         'histogram_quantile(0.5, sum by (instance, le) '
         '(rate(starling_node_step_seconds_bucket{job="starling-node"}[10s])))',
         lambda r: by_instance(r).keys() == nodes and
         all(finite(v) and v > 0 for _, v in r), 20,
         lambda r: ", ".join(f"{v * 1e3:.2f} ms" for _, v in r))
    poll(url, "compute ratio in (0, 1] on every node",
         'starling_node_compute_ratio{job="starling-node"} > 0 <= 1',
         lambda r: by_instance(r).keys() == nodes, 15,
         lambda r: ", ".join(f"{v:.2f}" for _, v in r))

    # NEW metrics (contract): assert when present, SKIP by name until then.
    targets = nodes | {coord}
    if exists(url, "starling_build_info"):
        def build_info_ok(r):
            seen = {}
            for labels, value in r:
                want = labels.get("job")
                if labels.get("program") != want or value != 1:
                    return False
                seen[labels.get("instance")] = labels.get("version", "")
            return seen.keys() == targets and all(seen.values())
        poll(url, "starling_build_info{program,version} == 1 on every process",
             "starling_build_info", build_info_ok, 10,
             lambda r: "version " + ",".join(sorted(
                 {l.get("version", "") for l, _ in r})))
    else:
        report("SKIP", "starling_build_info not exported yet (NEW)")

    if exists(url, "starling_node_rank"):
        poll(url, "starling_node_rank: the nodes hold ranks 0..N-1",
             'starling_node_rank{job="starling-node"}',
             lambda r: sorted(v for _, v in r) == list(range(ranks)), 10)
    else:
        report("SKIP", "starling_node_rank not exported yet (NEW)")

    if exists(url, "starling_collective_duration_seconds_count"):
        def labelled_ok(r):
            per_node = {}
            for labels, value in r:
                if (labels.get("op") not in OPS or
                        labels.get("algorithm") not in ALGORITHMS or
                        labels.get("size_bucket") not in SIZE_BUCKETS):
                    return False
                per_node.setdefault(labels.get("instance"), 0)
                per_node[labels.get("instance")] += value
            return per_node.keys() == nodes and all(
                v > 0 for v in per_node.values())
        poll(url, "collective durations by op/algorithm/size_bucket, "
             "valid label values, samples on every node",
             'sum by (instance, op, algorithm, size_bucket) '
             '(starling_collective_duration_seconds_count{job="starling-node"})',
             labelled_ok, 15,
             lambda r: ", ".join(sorted({
                 f'{l["op"]}/{l["algorithm"]}/{l["size_bucket"]}'
                 for l, _ in r})))
        poll(url, "collective bus bandwidth (rate(bus_bytes) / "
             "rate(duration_sum)) finite and positive on every node",
             'sum by (instance) (rate(starling_collective_bus_bytes_total'
             '{job="starling-node"}[10s])) / sum by (instance) (rate('
             'starling_collective_duration_seconds_sum{job="starling-node"}'
             '[10s]))',
             lambda r: by_instance(r).keys() == nodes and
             all(finite(v) and v > 0 for _, v in r), 20,
             lambda r: ", ".join(f"{v / 1e9:.2f} GB/s" for _, v in r))
        poll(url, "collective payload bytes grow on every node",
             'sum by (instance) (rate(starling_collective_bytes_total'
             '{job="starling-node"}[10s])) > 0',
             lambda r: by_instance(r).keys() == nodes, 20)
    else:
        report("SKIP", "starling_collective_duration_seconds not exported "
               "yet (NEW)")

    if exists(url, "starling_transport_sent_bytes_total"):
        def peers_ok(r):
            per_node = {}
            for labels, value in r:
                peer = labels.get("peer", "")
                if not peer.isdigit() or int(peer) >= ranks:
                    return False
                per_node.setdefault(labels["instance"], set()).add(peer)
            return per_node.keys() == nodes
        poll(url, "bytes sent per peer: every node sends to decimal-rank peers",
             'rate(starling_transport_sent_bytes_total{job="starling-node"}'
             '[10s]) > 0', peers_ok, 20,
             lambda r: f"{len(r)} (node, peer) pairs")
        poll(url, "bytes sent ~= bytes received over the group (within 25%)",
             'sum(rate(starling_transport_sent_bytes_total[10s])) / '
             'sum(rate(starling_transport_received_bytes_total[10s]))',
             lambda r: r and 0.8 < r[0][1] < 1.25, 20,
             lambda r: f"ratio {r[0][1]:.3f}")
    else:
        report("SKIP", "starling_transport_{sent,received}_bytes_total not "
               "exported yet (NEW)")

    if exists(url, "starling_collective_last_arrivals_total"):
        poll(url, "last arrivals counted by rank (0..N-1) on every node",
             'sum by (instance, rank) (starling_collective_last_arrivals_total'
             '{job="starling-node"})',
             lambda r: {l.get("instance") for l, _ in r} == nodes and all(
                 l.get("rank", "").isdigit() and int(l["rank"]) < ranks
                 for l, _ in r), 15)
    else:
        report("SKIP", "starling_collective_last_arrivals_total not exported "
               "yet (NEW)")
    if exists(url, "starling_collective_oldest_in_flight_seconds"):
        poll(url, "no collective in flight for over 10 s while training",
             'max(max_over_time(starling_collective_oldest_in_flight_seconds'
             '{job="starling-node"}[1m]))',
             lambda r: r and r[0][1] < 10, 10, lambda r: f"max {r[0][1]:.3f} s")
    else:
        report("SKIP", "starling_collective_oldest_in_flight_seconds not "
               "exported yet (NEW)")

    if exists(url, "starling_node_worker_loss"):
        poll(url, "worker loss finite and positive on every node",
             'starling_node_worker_loss{job="starling-node"}',
             lambda r: by_instance(r).keys() == nodes and
             all(finite(v) and v > 0 for _, v in r), 15,
             lambda r: ", ".join(f"{v:.3f}" for _, v in r))
    else:
        report("SKIP", "starling_node_worker_loss not exported yet (NEW)")
    if exists(url, "starling_node_worker_accuracy"):
        # Reported after each epoch's evaluation; 10 classes: chance is 0.1.
        poll(url, "worker test accuracy better than chance (> 0.1, <= 1) on "
             "every node",
             'starling_node_worker_accuracy{job="starling-node"} > 0.1 <= 1',
             lambda r: by_instance(r).keys() == nodes, 30,
             lambda r: ", ".join(f"{v:.3f}" for _, v in r))
    else:
        report("SKIP", "starling_node_worker_accuracy not exported yet (NEW)")
    if exists(url, "starling_node_worker_samples_total"):
        poll(url, "samples trained/s > 0 on every node",
             'rate(starling_node_worker_samples_total{job="starling-node"}'
             '[10s]) > 0',
             lambda r: by_instance(r).keys() == nodes, 20,
             lambda r: ", ".join(f"{v:.0f}/s" for _, v in r))
        if BATCH:
            # Each synchronous step trains one batch per worker (the last
            # steps of an epoch may have no partition left for some workers).
            poll(url, f"samples per step ~= the batch ({BATCH}) on every node",
                 'rate(starling_node_worker_samples_total{job="starling-node"}'
                 '[10s]) / rate(starling_node_steps_total{job="starling-node"}'
                 '[10s])',
                 lambda r: by_instance(r).keys() == nodes and all(
                     0.5 * BATCH <= v <= 1.2 * BATCH for _, v in r), 20,
                 lambda r: ", ".join(f"{v:.1f}" for _, v in r))
    else:
        report("SKIP", "starling_node_worker_samples_total not exported yet "
               "(NEW)")

    if rules:
        check_rules(url)


def check_rules(url):
    """Every alerting rule evaluated at least once on the live series
    without an error (a bad vector match only shows on real data), and the
    healthy cluster raises no StarlingNodeLost / StarlingNoProgress."""
    deadline = time.monotonic() + 20 * SCALE
    while True:
        groups = api(url, "/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        evaluated = [r for r in rules
                     if not r.get("lastEvaluation", "").startswith("0001")]
        if rules and len(evaluated) == len(rules):
            break
        if time.monotonic() >= deadline:
            report("FAIL", f"alert rules: {len(evaluated)} of {len(rules)} "
                   f"evaluated after {20 * SCALE:g} s")
            return
        time.sleep(0.5)
    bad = [f'{r["name"]}: {r.get("lastError")}' for r in rules
           if r.get("health") != "ok"]
    if bad:
        report("FAIL", "alert rules with errors on live data: " +
               "; ".join(bad))
    else:
        report("PASS", f"{len(rules)} alert rules evaluate without error on "
               "the live series (" + ", ".join(r["name"] for r in rules) + ")")
    active = [f'{a["labels"]["alertname"]}{{instance={a["labels"].get("instance")}}} '
              f'{a["state"]}'
              for r in rules for a in r.get("alerts", [])
              if a["labels"]["alertname"] in ("StarlingNodeLost",
                                              "StarlingNoProgress")]
    if active:
        report("FAIL", "healthy cluster raises: " + "; ".join(active))
    else:
        report("PASS", "healthy training cluster: no StarlingNodeLost or "
               "StarlingNoProgress alert")


def lost(url, instance):
    """After the test killed the node daemon at `instance`: Prometheus sees
    its target down and StarlingNodeLost goes pending for it."""
    poll(url, f"killed node {instance}: up == 0",
         f'up{{instance="{instance}"}} == 0', lambda r: len(r) == 1, 15)
    poll(url, f"StarlingNodeLost pending for {instance} (reason target down)",
         f'ALERTS{{alertname="StarlingNodeLost",instance="{instance}",'
         'reason="target down"}',
         lambda r: len(r) == 1, 15,
         lambda r: r[0][0].get("alertstate", ""))
    poll(url, "the coordinator counts the node failure "
         "(starling_coordinator_node_failures_total > 0)",
         'starling_coordinator_node_failures_total > 0',
         lambda r: len(r) == 1, 25, lambda r: f"{r[0][1]:g}")


def main(argv):
    if len(argv) >= 5 and argv[1] == "healthy":
        rules = "--rules" in argv
        args = [a for a in argv[2:] if a != "--rules"]
        if "--batch" in args:
            i = args.index("--batch")
            global BATCH
            BATCH = int(args[i + 1])
            del args[i:i + 2]
        if "--scrapes" in args:
            read_scrapes(args[args.index("--scrapes") + 1:])
            args = args[:args.index("--scrapes")]
        healthy(args[0], int(args[1]), args[2], args[3:], rules)
    elif len(argv) == 4 and argv[1] == "lost":
        lost(argv[2], argv[3])
    else:
        sys.stderr.write(__doc__)
        return 2
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
