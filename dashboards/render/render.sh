#!/usr/bin/env bash
# Renders dashboards/training.json from a real training run to
# dashboards/training.png:
#  1. a local cluster (tests/observability/cluster.sh: coordinator + RANKS
#     node daemons + RANKS starling-workers training the MLP on Fashion-MNIST)
#     and a Prometheus server scraping it every second;
#  2. training for TRAIN_SECONDS (default 100);
#  3. /api/v1/query_range for every panel's queries (render_data.py) into
#     data.js;
#  4. render.html (uPlot, one chart per panel) screenshot by headless
#     Chromium.
#
#   dashboards/render/render.sh                    # bazel-bin binaries
#   RANKS=4 TRAIN_SECONDS=120 dashboards/render/render.sh
#   STARLING_BIN_DIR=DIR DASHBOARD=dashboards/nodes.json OUT=/tmp/nodes.png \
#     dashboards/render/render.sh
#
# Needs: `bazel build --config=ci //server/... //worker/...`, Debian packages
# prometheus and chromium, and `npm ci` in dashboards/render (uPlot into
# node_modules). Every process it starts is stopped by pid.
set -euo pipefail
RENDER_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$RENDER_DIR/../.." && pwd)
RANKS=${RANKS:-3}
TRAIN_SECONDS=${TRAIN_SECONDS:-100}
DASHBOARD=${DASHBOARD:-$ROOT/dashboards/training.json}
OUT=${OUT:-$ROOT/dashboards/training.png}
WIDTH=${WIDTH:-1600}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}

UPLOT="$RENDER_DIR/node_modules/uplot/dist"
if [[ ! -f $UPLOT/uPlot.iife.min.js ]]; then
  echo "render: uPlot missing; run: (cd dashboards/render && npm ci)" >&2
  exit 1
fi
[[ -x $CHROMIUM ]] || { echo "render: chromium missing (apt-get install chromium)" >&2; exit 1; }
[[ -f $DASHBOARD ]] || { echo "render: no $DASHBOARD" >&2; exit 1; }

# shellcheck source=tests/observability/cluster.sh
source "$ROOT/tests/observability/cluster.sh"
cluster_find_binaries "${STARLING_BIN_DIR:-}"
WORK=$(mktemp -d /tmp/starling-render.XXXXXX)
cleanup() { cluster_stop; rm -rf "$WORK"; }

# The whole training set, so that loss and accuracy move like a real run.
CLUSTER_RANKS=$RANKS CLUSTER_TRAIN_LIMIT=${TRAIN_LIMIT:-60000} \
  CLUSTER_TEST_LIMIT=${TEST_LIMIT:-2000} CLUSTER_BATCH=64 CLUSTER_EPOCHS=1000 \
  cluster_start
trap cleanup EXIT
cluster_wait_ready 30
prometheus_start "$WORK/prom" 1s
start=$(date +%s)
cluster_rank_map "$WORK/ranks.json" || rm -f "$WORK/ranks.json"
echo "render: training $TRAIN_SECONDS s ($RANKS nodes), Prometheus $PROM_URL"
deadline=$((SECONDS + TRAIN_SECONDS))
while ((SECONDS < deadline)); do
  if ! cluster_alive; then
    cluster_dump_logs
    exit 1
  fi
  sleep 1
done
end=$(date +%s)
# One more scrape so that the last point is in.
sleep 1

ranks_arg=()
[[ -f $WORK/ranks.json ]] && ranks_arg=(--ranks "$WORK/ranks.json")
subtitle="Live run: $RANKS node daemons x 1 starling-worker on one host (loopback), \
MLP 784-256-128-10 on Fashion-MNIST (${TRAIN_LIMIT:-60000} images/epoch, batch 64 per worker), \
synchronous SGD with momentum; ${TRAIN_SECONDS} s of training, \
Prometheus scraping every 1 s; $(date -u -d "@$start" '+%Y-%m-%d %H:%M') UTC"
height=$(/usr/bin/python3 "$RENDER_DIR/render_data.py" --prometheus "$PROM_URL" \
  --dashboard "$DASHBOARD" --start "$start" --end "$end" --step 2 \
  "${ranks_arg[@]}" --subtitle "$subtitle" --out "$WORK/data.js")
cluster_stop
trap 'rm -rf "$WORK"' EXIT

cp "$RENDER_DIR/render.html" "$WORK/"
cp "$UPLOT/uPlot.iife.min.js" "$UPLOT/uPlot.min.css" "$WORK/"
chromium_args=(--headless --disable-gpu --hide-scrollbars --mute-audio
  --no-first-run --virtual-time-budget=5000 --force-device-scale-factor=1
  "--window-size=$WIDTH,$height" "--screenshot=$WORK/out.png")
[[ $(id -u) -eq 0 ]] && chromium_args+=(--no-sandbox)
TZ=UTC HOME=$WORK timeout 120 "$CHROMIUM" "${chromium_args[@]}" "file://$WORK/render.html" \
  > "$WORK/chromium.log" 2>&1 || { cat "$WORK/chromium.log" >&2; exit 1; }
[[ -s $WORK/out.png ]] || { echo "render: no screenshot" >&2; cat "$WORK/chromium.log" >&2; exit 1; }
cp "$WORK/out.png" "$OUT"
echo "render: wrote $OUT (${WIDTH}x$height)"
