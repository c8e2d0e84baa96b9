#!/usr/bin/env bash
# Observability end to end: a local training cluster (coordinator + N node
# daemons + N starling-workers training the MLP, tests/observability/
# cluster.sh) scraped by a real Prometheus server while it trains.
#
#  1. `promtool check metrics` on the live /metrics of every process: no
#     problem allowed.
#  2. /healthz and /readyz of every process (SKIP while they answer 404).
#  3. Prometheus (/usr/bin/prometheus, 1 s scrapes, deploy/prometheus/
#     alerts.yml loaded) and, through its HTTP API, what an operator reads:
#     every target up, steps increasing, group size N, step-time histogram
#     samples, and the contract's NEW metrics once exported (collectives by
#     algorithm/size_bucket, bytes per peer, build_info, worker loss and
#     accuracy); every alert rule evaluates without error on live data.
#  4. One node daemon killed: its target goes down and StarlingNodeLost goes
#     pending for it; the coordinator counts the failure.
#  5. With SCRAPE_DIR set, one raw scrape per process is kept there
#     (coordinator.prom, node0.prom, ...); when dashboards/tools/
#     dashboard_queries.py exists it checks every dashboard panel's metrics
#     against those scrapes.
#
# A Bazel sh_test (//tests/observability:prometheus_test), or from the
# repository root after `bazel build --config=ci //server/... //worker/...`:
#   tests/observability/prometheus_test.sh            # bazel-bin binaries
#   SCRAPE_DIR=/tmp/scrapes tests/observability/prometheus_test.sh
#   RANKS=4 STARLING_BIN_DIR=... tests/observability/prometheus_test.sh
# Takes ~30-40 s. Every process it starts is stopped by pid.
set -uo pipefail

if [[ -n ${TEST_SRCDIR:-} ]]; then
  ROOT="$TEST_SRCDIR/${TEST_WORKSPACE:-starling}"
else
  ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fi
HERE="$ROOT/tests/observability"
# shellcheck source=tests/observability/cluster.sh
source "$HERE/cluster.sh"
RANKS=${RANKS:-3}
T0=$SECONDS
failed=0
pass() { echo "PASS: $*"; }
skip() { echo "SKIP: $*"; }
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
elapsed() { echo "[$((SECONDS - T0)) s]"; }

command -v curl >/dev/null || { echo "FAIL: curl not installed"; exit 1; }
PROMTOOL=$(command -v promtool || echo /usr/bin/promtool)
[[ -x $PROMTOOL ]] || { echo "FAIL: promtool not installed (apt-get install prometheus)"; exit 1; }

cluster_find_binaries "${STARLING_BIN_DIR:-}" || exit 1
WORK=$(mktemp -d "${TEST_TMPDIR:-/tmp}/starling-promtest.XXXXXX")
CLUSTER_DIR=$(mktemp -d /tmp/starling-obs.XXXXXX)   # short unix socket paths
CLUSTER_OWN_DIR=1
cleanup() {
  cluster_stop
  rm -rf "$WORK"
}
CLUSTER_RANKS=$RANKS CLUSTER_EPOCHS=${CLUSTER_EPOCHS:-1000} cluster_start || exit 1
trap cleanup EXIT
if ! cluster_wait_ready 30; then
  echo "FAIL: the cluster did not form"; exit 1
fi
for t in "${CLUSTER_NODE_METRICS[@]}"; do
  cluster_wait_metric "http://$t/metrics" starling_node_steps_total 1 30 ||
    { cluster_dump_logs; echo "FAIL: node $t never stepped"; exit 1; }
done
echo "$(elapsed) cluster of $RANKS nodes training"

# Prometheus first, so that it scrapes while the raw checks run.
ALERTS="$ROOT/deploy/prometheus/alerts.yml"
rule_args=()
[[ -f $ALERTS ]] && rule_args=("$ALERTS")
if ! prometheus_start "$WORK/prom" 1s "${rule_args[@]}"; then
  echo "FAIL: Prometheus did not start"; exit 1
fi
echo "$(elapsed) Prometheus at $PROM_URL (pid $PROM_PID)"

# 1. promtool check metrics on each process' live /metrics.
echo "$(elapsed) promtool check metrics"
SCRAPES="$WORK/scrapes"
mkdir -p "$SCRAPES"
for i in "${!CLUSTER_METRICS_URLS[@]}"; do
  name=${CLUSTER_NAMES[$i]} url=${CLUSTER_METRICS_URLS[$i]}
  file="$SCRAPES/$name.prom"
  if ! curl -fsS --max-time 5 "$url" -o "$file"; then
    fail "$name: GET $url"
    continue
  fi
  out=$("$PROMTOOL" check metrics < "$file" 2>&1)
  rc=$?
  if [[ $rc -eq 0 && -z $out ]]; then
    pass "promtool check metrics: $name ($(grep -vc '^#' "$file") samples, $(grep -c '^# TYPE' "$file") families)"
  else
    fail "promtool check metrics: $name (rc $rc): $out"
  fi
done
if [[ -n ${SCRAPE_DIR:-} ]]; then
  mkdir -p "$SCRAPE_DIR" && cp "$SCRAPES"/*.prom "$SCRAPE_DIR"/ &&
    echo "scrapes saved in $SCRAPE_DIR: $(cd "$SCRAPE_DIR" && echo *.prom)"
fi

# 2. /healthz and /readyz.
echo "$(elapsed) /healthz and /readyz"
for i in "${!CLUSTER_METRICS_URLS[@]}"; do
  name=${CLUSTER_NAMES[$i]} base=${CLUSTER_METRICS_URLS[$i]%/metrics}
  for path in healthz readyz; do
    code=$(curl -sS --max-time 5 -o "$WORK/body" -w '%{http_code}' "$base/$path")
    body=$(head -c 200 "$WORK/body" 2>/dev/null)
    if [[ $code == 404 ]]; then
      skip "$name /$path answers 404 (not served by this build yet)"
    elif [[ $code == 200 && ( $path != healthz || $body == ok* ) ]]; then
      pass "$name /$path: 200 ${body//$'\n'/ }"
    else
      fail "$name /$path: HTTP $code '$body' (want 200${path/readyz/}${path/healthz/ \"ok\"})"
    fi
  done
done

# 3. Through Prometheus.
echo "$(elapsed) querying Prometheus"
rules_flag=()
((${#rule_args[@]})) && rules_flag=(--rules)
/usr/bin/python3 "$HERE/prom_checks.py" healthy "$PROM_URL" "$RANKS" \
  "$CLUSTER_COORD_METRICS" "${CLUSTER_NODE_METRICS[@]}" "${rules_flag[@]}" \
  --batch "${CLUSTER_BATCH:-32}" --scrapes "$SCRAPES"/*.prom ||
  failed=$((failed + 1))

# 5. Dashboards against the scrapes (before the node kill changes them).
TOOL="$ROOT/dashboards/tools/dashboard_queries.py"
shopt -s nullglob
dashboards=("$ROOT"/dashboards/*.json)
shopt -u nullglob
if [[ -f $TOOL && ${#dashboards[@]} -gt 0 ]]; then
  if /usr/bin/python3 "$TOOL" check-scrape "$SCRAPES"/*.prom -- "${dashboards[@]}"; then
    pass "dashboard_queries.py check-scrape: ${#dashboards[@]} dashboard(s)"
  else
    fail "dashboard_queries.py check-scrape (a panel queries a metric no scrape has)"
  fi
else
  skip "dashboards/tools/dashboard_queries.py or dashboards/*.json not present"
fi

# 4. A node daemon killed (the last one): seen by Prometheus and the rules.
if ((${#rule_args[@]})); then
  victim=$((RANKS - 1))
  victim_pid=${CLUSTER_PIDS[$((1 + victim))]}
  echo "$(elapsed) killing node$victim (pid $victim_pid)"
  kill -9 "$victim_pid" 2>/dev/null
  { wait "$victim_pid"; } 2>/dev/null
  /usr/bin/python3 "$HERE/prom_checks.py" lost "$PROM_URL" \
    "${CLUSTER_NODE_METRICS[$victim]}" || failed=$((failed + 1))
fi

echo "$(elapsed) done"
if ((failed)); then
  echo "prometheus_test: $failed failure(s); logs:"
  cluster_dump_logs
  tail -5 "$WORK/prom/prometheus.log" 2>/dev/null
  exit 1
fi
echo "prometheus_test: all checks passed"
