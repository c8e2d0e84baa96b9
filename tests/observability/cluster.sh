# shellcheck shell=bash
# A local Starling training cluster on loopback, for observability tests and
# tools: one starling-coordinator, N starling-node daemons and N
# starling-workers training the MLP on a slice of Fashion-MNIST, every
# process on a free port, every pid recorded and stopped by pid.
#
# Source it, then:
#
#   cluster_find_binaries [BIN_DIR]   # bazel-bin, or the Bazel runfiles
#   cluster_start                     # uses the CLUSTER_* settings below
#   cluster_wait_ready 30             # every /metrics answers, group formed
#   ... scrape "${CLUSTER_METRICS_URLS[@]}", read $CLUSTER_TARGETS ...
#   cluster_stop                      # also installed as an EXIT trap
#
# Settings (environment, read by cluster_start):
#   CLUSTER_RANKS        node daemons = workers (default 3)
#   CLUSTER_EPOCHS       epochs of the run (default 1000: the run trains
#                        until cluster_stop; set it low for a run that ends)
#   CLUSTER_TRAIN_LIMIT  training samples per epoch (default 2048)
#   CLUSTER_TEST_LIMIT   test samples evaluated per epoch (default 256)
#   CLUSTER_BATCH        batch per worker step (default 32)
#   CLUSTER_LR           learning rate (default 0.05)
#   CLUSTER_DIR          work directory (default: mktemp -d under /tmp; unix
#                        socket paths must stay short)
#   CLUSTER_LOG_LEVEL    the daemons' --log_level (default warning)
#
# After cluster_start:
#   CLUSTER_DIR, CLUSTER_JOB                 the work directory and job id
#   CLUSTER_COORD_ADDR                       host:port of the coordinator's gRPC
#   CLUSTER_COORD_METRICS                    host:port of its /metrics
#   CLUSTER_NODE_METRICS[r]                  host:port of node r's /metrics
#   CLUSTER_METRICS_URLS[i]                  every process' /metrics URL
#                                            (coordinator first)
#   CLUSTER_NAMES[i]                         coordinator, node0, node1, ...
#   CLUSTER_TARGETS                          Prometheus file_sd JSON (jobs
#                                            starling-coordinator, starling-node)
#   CLUSTER_PIDS                             every pid started (also in $CLUSTER_DIR/pids)
#   CLUSTER_WORKER_PIDS                      the workers' pids
# Logs: $CLUSTER_DIR/{coordinator,node<r>}.log and worker<r>.log.
#
# Needs bash 4, curl and /usr/bin/python3 (free ports). No pkill/killall:
# only the recorded pids are signalled.

CLUSTER_PIDS=()
CLUSTER_WORKER_PIDS=()
CLUSTER_EXTRA_PIDS=()   # others may append (e.g. a Prometheus server)
CLUSTER_OWN_DIR=0

cluster_log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }

# Sets COORD_BIN, NODE_BIN, WORKER_BIN, CTL_BIN. Order: the argument, then
# $STARLING_BIN_DIR, then the Bazel test runfiles, then <repo>/bazel-bin.
cluster_find_binaries() {
  local dir=${1:-${STARLING_BIN_DIR:-}}
  if [[ -z $dir && -n ${TEST_SRCDIR:-} ]]; then
    dir="$TEST_SRCDIR/${TEST_WORKSPACE:-starling}"
  fi
  if [[ -z $dir ]]; then
    local here
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    dir="$here/bazel-bin"
  fi
  COORD_BIN="$dir/server/coordinator/starling-coordinator"
  CTL_BIN="$dir/server/coordinator/starlingctl"
  NODE_BIN="$dir/server/node/starling-node"
  WORKER_BIN="$dir/worker/trainer/starling-worker"
  local b
  for b in "$COORD_BIN" "$NODE_BIN" "$WORKER_BIN"; do
    if [[ ! -x $b ]]; then
      cluster_log "missing binary $b (bazel build --config=ci //server/... //worker/...)"
      return 1
    fi
  done
  [[ -x $CTL_BIN ]] || CTL_BIN=""
}

# Prints COUNT distinct free TCP ports on 127.0.0.1, one a line. All are
# bound at once before any is released, so they differ from each other.
cluster_free_ports() {
  /usr/bin/python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
for s in socks:
    s.close()
EOF
}

cluster_start() {
  local ranks=${CLUSTER_RANKS:-3}
  local epochs=${CLUSTER_EPOCHS:-1000}
  local train_limit=${CLUSTER_TRAIN_LIMIT:-2048}
  local test_limit=${CLUSTER_TEST_LIMIT:-256}
  local batch=${CLUSTER_BATCH:-32}
  local lr=${CLUSTER_LR:-0.05}
  local level=${CLUSTER_LOG_LEVEL:-warning}
  [[ -n ${COORD_BIN:-} ]] || cluster_find_binaries "${STARLING_BIN_DIR:-}" || return 1
  if [[ -z ${CLUSTER_DIR:-} ]]; then
    CLUSTER_DIR=$(mktemp -d /tmp/starling-obs.XXXXXX) || return 1
    CLUSTER_OWN_DIR=1
  fi
  mkdir -p "$CLUSTER_DIR"
  CLUSTER_JOB="obs$$"
  local -a ports
  mapfile -t ports < <(cluster_free_ports $((2 + 3 * ranks)))
  if [[ ${#ports[@]} -ne $((2 + 3 * ranks)) ]]; then
    cluster_log "could not find free ports"
    return 1
  fi
  CLUSTER_COORD_ADDR="127.0.0.1:${ports[0]}"
  CLUSTER_COORD_METRICS="127.0.0.1:${ports[1]}"
  local partitions=$(((train_limit + batch - 1) / batch))
  trap cluster_stop EXIT
  # A signal ends the shell through its EXIT trap (background jobs of a
  # non-interactive shell ignore SIGINT, so nothing else would stop them).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  "$COORD_BIN" --job_id "$CLUSTER_JOB" --expected_nodes "$ranks" \
    --mode sync_sgd --optimizer momentum --learning_rate "$lr" \
    --epochs "$epochs" --partitions_per_epoch "$partitions" \
    --iterations_per_schedule 16 --listen "$CLUSTER_COORD_ADDR" \
    --metrics_port "${ports[1]}" --log_level "$level" \
    > "$CLUSTER_DIR/coordinator.log" 2>&1 &
  CLUSTER_PIDS+=($!)
  CLUSTER_NAMES=(coordinator)
  CLUSTER_METRICS_URLS=("http://$CLUSTER_COORD_METRICS/metrics")
  CLUSTER_NODE_METRICS=()
  local r
  for ((r = 0; r < ranks; r++)); do
    local data=${ports[2 + 3 * r]} admin=${ports[3 + 3 * r]} met=${ports[4 + 3 * r]}
    "$NODE_BIN" --coordinator "$CLUSTER_COORD_ADDR" --job_id "$CLUSTER_JOB" \
      --hostname "node$r" --data_port "$data" --admin_port "$admin" \
      --metrics_port "$met" --worker_socket "$CLUSTER_DIR/node$r.sock" \
      --local_workers 1 --log_level "$level" \
      > "$CLUSTER_DIR/node$r.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_NODE_METRICS+=("127.0.0.1:$met")
    CLUSTER_NAMES+=("node$r")
    CLUSTER_METRICS_URLS+=("http://127.0.0.1:$met/metrics")
  done
  for ((r = 0; r < ranks; r++)); do
    # The worker waits (--timeout) for its daemon's socket to appear.
    "$WORKER_BIN" --socket "$CLUSTER_DIR/node$r.sock" --worker_index 0 \
      --model mlp --batch_size "$batch" --train_limit "$train_limit" \
      --test_limit "$test_limit" --progress_interval 5s --timeout 60s \
      > "$CLUSTER_DIR/worker$r.log" 2>&1 &
    CLUSTER_PIDS+=($!)
    CLUSTER_WORKER_PIDS+=($!)
  done
  printf '%s\n' "${CLUSTER_PIDS[@]}" > "$CLUSTER_DIR/pids"
  CLUSTER_TARGETS="$CLUSTER_DIR/targets.json"
  cluster_write_targets "$CLUSTER_TARGETS"
  cluster_log "started job $CLUSTER_JOB: coordinator $CLUSTER_COORD_ADDR" \
    "(metrics $CLUSTER_COORD_METRICS), $ranks nodes (metrics" \
    "${CLUSTER_NODE_METRICS[*]}), $ranks workers; dir $CLUSTER_DIR"
}

# Writes a Prometheus file_sd target list (JSON) to $1.
cluster_write_targets() {
  local nodes="" t
  for t in "${CLUSTER_NODE_METRICS[@]}"; do
    nodes+="${nodes:+, }\"$t\""
  done
  cat > "$1.tmp" <<EOF
[
  {"targets": ["$CLUSTER_COORD_METRICS"], "labels": {"job": "starling-coordinator"}},
  {"targets": [$nodes], "labels": {"job": "starling-node"}}
]
EOF
  mv "$1.tmp" "$1"
}

# True while every process started is alive; names the first that is not.
cluster_alive() {
  local p
  for p in "${CLUSTER_PIDS[@]}"; do
    if ! kill -0 "$p" 2>/dev/null; then
      cluster_log "process $p exited"
      return 1
    fi
  done
}

# cluster_wait_ready SECONDS: polls until every /metrics answers and every
# node reports the full group (starling_node_group_size == ranks). Fails at
# the deadline or as soon as a process exits.
cluster_wait_ready() {
  local deadline=$((SECONDS + ${1:-30})) ranks=${#CLUSTER_NODE_METRICS[@]}
  local url ok t
  while ((SECONDS < deadline)); do
    cluster_alive || { cluster_dump_logs; return 1; }
    ok=1
    if ! curl -fsS --max-time 2 -o /dev/null "http://$CLUSTER_COORD_METRICS/metrics" 2>/dev/null; then
      ok=0
    fi
    for t in "${CLUSTER_NODE_METRICS[@]}"; do
      url="http://$t/metrics"
      if ! curl -fsS --max-time 2 "$url" 2>/dev/null |
          awk -v n="$ranks" '$1 == "starling_node_group_size" && $2 == n { f = 1 } END { exit !f }'; then
        ok=0
        break
      fi
    done
    ((ok)) && return 0
    sleep 0.2
  done
  cluster_log "not ready after ${1:-30} s"
  cluster_dump_logs
  return 1
}

# cluster_wait_metric URL METRIC MIN SECONDS: polls URL until the sum of
# METRIC's samples (any labels) is >= MIN.
cluster_wait_metric() {
  local url=$1 metric=$2 min=$3 deadline=$((SECONDS + $4))
  while ((SECONDS < deadline)); do
    if curl -fsS --max-time 2 "$url" 2>/dev/null |
        awk -v m="$metric" -v min="$min" '
          { name = $1; sub(/\{.*/, "", name) }
          name == m { s += $NF; f = 1 }
          END { exit !(f && s >= min) }'; then
      return 0
    fi
    cluster_alive || return 1
    sleep 0.2
  done
  cluster_log "$metric at $url did not reach $min in $4 s"
  return 1
}

# cluster_rank_map FILE: writes {"host:metrics_port": {"rank": R,
# "hostname": "nodeX"}, ...} for the node daemons, from the group table of
# `starlingctl status` (ranks are assigned by the coordinator, not by start
# order). Fails when starlingctl is missing or does not answer.
cluster_rank_map() {
  local out=$1 status i
  [[ -n ${CTL_BIN:-} ]] || return 1
  status=$("$CTL_BIN" status --coordinator "$CLUSTER_COORD_ADDR" \
    --job_id "$CLUSTER_JOB" 2>/dev/null) || return 1
  {
    echo "{"
    for i in "${!CLUSTER_NODE_METRICS[@]}"; do
      local rank
      rank=$(awk -v h="node$i" '$2 == h && $1 ~ /^[0-9]+$/ { print $1; exit }' <<< "$status")
      [[ -n $rank ]] || return 1
      printf '  "%s": {"rank": %d, "hostname": "node%d"}%s\n' \
        "${CLUSTER_NODE_METRICS[$i]}" "$rank" "$i" \
        "$([[ $i -lt $((${#CLUSTER_NODE_METRICS[@]} - 1)) ]] && echo ,)"
    done
    echo "}"
  } > "$out"
}

cluster_dump_logs() {
  local f
  for f in "$CLUSTER_DIR"/*.log; do
    [[ -f $f ]] || continue
    echo "--- $f (last 15 lines)" >&2
    tail -15 "$f" >&2
  done
}

# Stops every recorded process by pid (TERM, then KILL after 5 s), waits for
# them, and removes the work directory if cluster_start created it and
# CLUSTER_KEEP is not set. Safe to call twice.
cluster_stop() {
  local -a all=("${CLUSTER_EXTRA_PIDS[@]}" "${CLUSTER_WORKER_PIDS[@]}" "${CLUSTER_PIDS[@]}")
  local p i
  ((${#all[@]})) || return 0
  for p in "${all[@]}"; do kill "$p" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    local left=0
    for p in "${all[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for p in "${all[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${all[@]}"; do wait "$p" 2>/dev/null || true; done
  CLUSTER_PIDS=()
  CLUSTER_WORKER_PIDS=()
  CLUSTER_EXTRA_PIDS=()
  if ((CLUSTER_OWN_DIR)) && [[ -z ${CLUSTER_KEEP:-} && -d ${CLUSTER_DIR:-} ]]; then
    rm -rf "$CLUSTER_DIR"
  fi
}

# prometheus_start CONFIG_DIR [SCRAPE_INTERVAL] [RULE_FILE...]: a Prometheus
# server (/usr/bin/prometheus) scraping $CLUSTER_TARGETS on a free loopback
# port. Sets PROM_URL and PROM_PID (also appended to CLUSTER_EXTRA_PIDS, so
# cluster_stop stops it). Waits up to 20 s for /-/ready.
prometheus_start() {
  local dir=$1 interval=${2:-1s}
  shift 2 || shift $#
  local prom=${PROMETHEUS_BIN:-/usr/bin/prometheus}
  [[ -x $prom ]] || { cluster_log "no $prom (apt-get install prometheus)"; return 1; }
  mkdir -p "$dir/data"
  local rules="" f
  for f in "$@"; do rules+="  - $f"$'\n'; done
  cat > "$dir/prometheus.yml" <<EOF
global:
  scrape_interval: $interval
  scrape_timeout: $interval
  evaluation_interval: $interval
${rules:+rule_files:
$rules}scrape_configs:
  - job_name: starling
    file_sd_configs:
      - files: ['$CLUSTER_TARGETS']
        refresh_interval: 5s
EOF
  local port
  port=$(cluster_free_ports 1)
  "$prom" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn \
    > "$dir/prometheus.log" 2>&1 &
  PROM_PID=$!
  CLUSTER_EXTRA_PIDS+=("$PROM_PID")
  PROM_URL="http://127.0.0.1:$port"
  local deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)); do
    curl -fsS --max-time 1 -o /dev/null "$PROM_URL/-/ready" 2>/dev/null && return 0
    kill -0 "$PROM_PID" 2>/dev/null || break
    sleep 0.2
  done
  cluster_log "prometheus did not become ready"
  tail -20 "$dir/prometheus.log" >&2
  return 1
}
