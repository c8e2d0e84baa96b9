#!/usr/bin/env bash
# Measures the node daemon's synchronous step on loopback: one
# starling-coordinator, D starling-node daemons of W sync_step_worker
# processes each, sync SGD on DIM float32 parameters, warm-up steps then
# timed steps. Prints one row per daemon: the workers' median step time
# (pull + gradient + push) and its parts, the daemon's mean step time
# (starling_node_step_seconds) and the bytes its own code read and wrote per
# step (starling_node_copied_bytes_total, by phase), then the hash of the
# final parameters (equal on every worker; equal across builds whose sums
# are bit-identical).
#
#   tests/bench/sync_step_bench.sh                  # build -c opt, 4 x 2, 1e7, 3 + 20 steps
#   tests/bench/sync_step_bench.sh --bin DIR        # binaries from DIR, no build
#   tests/bench/sync_step_bench.sh --daemons 2 --workers 1 --dim 1000000 --steps 10
#   tests/bench/sync_step_bench.sh --pull-view      # workers read views, no pull copies
#   tests/bench/sync_step_bench.sh --netns 1gbit --workers 1 --replicas 0
#                                  # one daemon per simulated host (peerbench)
#
# Options: --daemons D (4) --workers W (2) --dim N (10000000) --warmup N (3)
# --steps N (20) --port-base P (38400: coordinator P, its metrics P+1,
# daemon r data P+10+r, admin P+40+r, metrics P+70+r) --bin DIR (holding
# starling-coordinator, starling-node, sync_step_worker) --keep (leave the
# scratch directory with every process's logs) --pull-view (workers read
# the parameters in place: Client::ParametersView, sync_step_worker
# --pull_view) --optimizer NAME (the coordinator's, default sgd)
# --replicas N (the coordinator's --replicas: 1, each shard also on a buddy
# daemon, the default, for an optimizer with state or a 16-bit wire; 0, one
# copy) --netns RATE (each
# daemon and its workers in host namespace h<r> of ../shared/peerbench's
# simulated cluster, one NIC of RATE each, the coordinator on its control
# host, the daemons sharing a cluster secret; needs root and
# deploy/setup.sh --bench; the cluster is taken down on exit) --compute D
# (each worker sleeps D per step, as while a GPU computes) --pipeline
# (workers push asynchronously and wait for step t's push at step t + 2,
# as starling-worker does) --checkpoint_every K (durable checkpoints every
# K committed steps into the scratch directory: the coordinator's
# --checkpoint_dir and --checkpoint_every_steps; 0, none, the default).
# Every process this script starts is stopped
# on exit, by pid.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DAEMONS=4 WORKERS=2 DIM=10000000 WARMUP=3 STEPS=20 PORT_BASE=38400 BIN="" KEEP=0
BUILT_BIN= PULL_VIEW=0 REPLICAS=1 NETNS="" OPTIMIZER=sgd COMPUTE=0s PIPELINE=0
CHECKPOINT_EVERY=0
PEERBENCH_SRC=${PEERBENCH_SRC:-$REPO/../shared/peerbench}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --daemons) DAEMONS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --port-base) PORT_BASE=$2; shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    --keep) KEEP=1; shift ;;
    --pull-view) PULL_VIEW=1; shift ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --optimizer) OPTIMIZER=$2; shift 2 ;;
    --compute) COMPUTE=$2; shift 2 ;;
    --pipeline) PIPELINE=1; shift ;;
    --checkpoint_every) CHECKPOINT_EVERY=$2; shift 2 ;;
    --netns) NETNS=$2; shift 2 ;;
    -h|--help) sed -n 2,35p "$0"; exit 0 ;;
    *) echo "sync_step_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

if [[ -z $BIN ]]; then
  echo "== building (-c opt)"
  (cd "$REPO" && bazel build --config=ci -c opt \
      //server/coordinator:starling-coordinator //server/node:starling-node \
      //tests/bench:sync_step_worker >/dev/null)
  OPT_BIN=$(cd "$REPO" && bazel info --config=ci -c opt bazel-bin 2>/dev/null)
  BIN=$(mktemp -d /tmp/sync_step_bench_bin.XXXXXX)
  BUILT_BIN=$BIN
  cp "$OPT_BIN/server/coordinator/starling-coordinator" \
     "$OPT_BIN/server/node/starling-node" \
     "$OPT_BIN/tests/bench/sync_step_worker" "$BIN/"
fi
for b in starling-coordinator starling-node sync_step_worker; do
  [[ -x $BIN/$b ]] || { echo "sync_step_bench.sh: no $BIN/$b" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/sync_step_bench.XXXXXX)
PIDS=()
WORKER_PIDS=()
# In the simulated cluster: host r's namespace and addresses; else loopback.
in_host() { if [[ -n $NETNS ]]; then ip netns exec "h$1" "${@:2}"; else "${@:2}"; fi; }
in_ctl() { if [[ -n $NETNS ]]; then ip netns exec pbctl "$@"; else "$@"; fi; }
# For `spawn_* ... &`: the background subshell becomes the process itself
# (exec), so that $! is the daemon's or worker's pid and cleanup's kill
# reaches it, not a subshell that leaves it running.
spawn_host() { if [[ -n $NETNS ]]; then exec ip netns exec "h$1" "${@:2}"; else exec "${@:2}"; fi; }
spawn_ctl() { if [[ -n $NETNS ]]; then exec ip netns exec pbctl "$@"; else exec "$@"; fi; }
PB=$WORK/peerbench
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ -n $NETNS && -d $PB ]]; then (cd "$PB" && ./cluster.sh down >/dev/null 2>&1) || true; fi
  if [[ $KEEP == 1 ]]; then
    echo "logs: $WORK"
  else
    rm -rf "$WORK"
    [[ -z $BUILT_BIN ]] || rm -rf "$BUILT_BIN"
  fi
}
trap cleanup EXIT

logs() {
  for f in "$WORK"/*.err; do echo "--- $(basename "$f")"; tail -5 "$f"; done >&2
}

# Waits until N files match $WORK/sync/$1.*, failing when a worker died.
wait_for() {
  local phase=$1 n=$((DAEMONS * WORKERS)) deadline=$((SECONDS + 900))
  while (( $(find "$WORK/sync" -name "$phase.*" | wc -l) < n )); do
    for pid in "${WORKER_PIDS[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "sync_step_bench.sh: a worker exited before '$phase'" >&2; logs; exit 1
      fi
    done
    (( SECONDS < deadline )) || { echo "sync_step_bench.sh: timeout at '$phase'" >&2; logs; exit 1; }
    sleep 0.05
  done
}

scrape() {
  for ((r = 0; r < DAEMONS; r++)); do
    local host=127.0.0.1
    [[ -n $NETNS ]] && host=10.77.0.$((r + 1))
    in_host "$r" curl -sf "http://$host:$((PORT_BASE + 70 + r))/metrics" >"$WORK/metrics.$1.$r"
  done
  # CPU time (jiffies) of the machine and of this job's processes, to tell
  # how much other processes took during the timed steps.
  local _cpu user nice system idle iowait irq softirq steal _rest ours=0 pid stat
  read -r _cpu user nice system idle iowait irq softirq steal _rest </proc/stat
  for pid in "${PIDS[@]}"; do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    stat=${stat##*) }
    read -r -a f <<<"$stat"
    ours=$((ours + f[11] + f[12]))
  done
  echo "$((user + nice + system + idle + iowait + irq + softirq + steal)) $((user + nice + system + irq + softirq + steal)) $ours" >"$WORK/cpu.$1"
}

mkdir -p "$WORK/sync"
COORD=127.0.0.1:$PORT_BASE
if [[ -n $NETNS ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "sync_step_bench.sh: --netns needs root (ip netns, tc)" >&2; exit 2; }
  [[ -d $PEERBENCH_SRC ]] || { echo "sync_step_bench.sh: no peerbench at $PEERBENCH_SRC (set PEERBENCH_SRC)" >&2; exit 2; }
  cp -r "$PEERBENCH_SRC" "$PB" && chmod -R u+w "$PB"
  echo "== simulated cluster: $DAEMONS hosts, $NETNS each"
  (cd "$PB" && ./cluster.sh up "$DAEMONS" "$NETNS" >/dev/null)
  for ((r = 0; r < DAEMONS; r++)); do ip netns exec "h$r" ip link set lo up; done
  COORD=10.77.0.254:$PORT_BASE
  head -c 32 /dev/urandom >"$WORK/secret"
  chmod 600 "$WORK/secret"
fi
# In the namespaces the coordinator listens where other hosts reach it:
# with the daemons' secret.
SECRET_FLAGS=()
[[ -n $NETNS ]] && SECRET_FLAGS=(--cluster_secret_file "$WORK/secret")
CHECKPOINT_FLAGS=()
[[ $CHECKPOINT_EVERY != 0 ]] && CHECKPOINT_FLAGS=(--checkpoint_dir "$WORK/checkpoints"
                                                  --checkpoint_every_steps "$CHECKPOINT_EVERY")
spawn_ctl "$BIN/starling-coordinator" --job_id bench --expected_nodes "$DAEMONS" \
    --replicas "$REPLICAS" --optimizer "$OPTIMIZER" "${CHECKPOINT_FLAGS[@]}" \
    --parameter_count "$DIM" --learning_rate 0.1 --listen "$COORD" "${SECRET_FLAGS[@]}" \
    --metrics_port $((PORT_BASE + 1)) --log_level warning \
    >"$WORK/coordinator.out" 2>"$WORK/coordinator.err" &
PIDS+=($!)
for ((r = 0; r < DAEMONS; r++)); do
  DATA_ADDRESS=()
  [[ -n $NETNS ]] && DATA_ADDRESS=(--data_address "10.77.0.$((r + 1))"
                                   --cluster_secret_file "$WORK/secret")
  spawn_host "$r" "$BIN/starling-node" --coordinator "$COORD" --job_id bench --hostname "node$r" \
      "${DATA_ADDRESS[@]}" --data_port $((PORT_BASE + 10 + r)) --admin_port $((PORT_BASE + 40 + r)) \
      --metrics_port $((PORT_BASE + 70 + r)) --worker_socket "$WORK/node$r.sock" \
      --local_workers "$WORKERS" --log_level warning \
      >"$WORK/node$r.out" 2>"$WORK/node$r.err" &
  PIDS+=($!)
done
# Only when asked for, so that workers built before these flags run too.
VIEW_FLAG=()
[[ $COMPUTE != 0s ]] && VIEW_FLAG+=(--compute "$COMPUTE")
[[ $PULL_VIEW == 1 ]] && VIEW_FLAG+=(--pull_view)
[[ $PIPELINE == 1 ]] && VIEW_FLAG+=(--pipeline)
for ((r = 0; r < DAEMONS; r++)); do
  for ((w = 0; w < WORKERS; w++)); do
    spawn_host "$r" "$BIN/sync_step_worker" --worker_socket "$WORK/node$r.sock" --worker_index "$w" \
        --dim "$DIM" --warmup "$WARMUP" --steps "$STEPS" --sync_dir "$WORK/sync" \
        "${VIEW_FLAG[@]}" \
        >"$WORK/worker$r.$w.out" 2>"$WORK/worker$r.$w.err" &
    PIDS+=($!)
    WORKER_PIDS+=($!)
  done
done

wait_for timed
scrape timed
touch "$WORK/sync/timed.go"
wait_for "done"
scrape "done"
touch "$WORK/sync/done.go"
for pid in "${WORKER_PIDS[@]}"; do
  wait "$pid" || { echo "sync_step_bench.sh: a worker failed" >&2; logs; exit 1; }
done

echo "commit $(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD -- server || echo ' (server/ modified)'), binaries $BIN"
echo "$DAEMONS daemons x $WORKERS workers, $DIM float32 parameters, sync SGD$([[ $PULL_VIEW == 1 ]] && echo ', pulls by view'), compute $COMPUTE$([[ $PIPELINE == 1 ]] && echo ', pipelined pushes'), optimizer $OPTIMIZER, replicas $REPLICAS, checkpoints every $CHECKPOINT_EVERY steps (0: none), $([[ -n $NETNS ]] && echo "simulated hosts of $NETNS" || echo loopback), $WARMUP warm-up + $STEPS timed steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$WORK" "$DAEMONS" "$WORKERS" "$STEPS" <<'EOF'
import re, sys
work, daemons, workers, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def metrics(path):
    out = {}
    for line in open(path):
        if line.startswith('#') or not line.strip():
            continue
        name, value = line.rsplit(' ', 1)
        out[name] = float(value)
    return out

def diff(a, b, name):
    return b.get(name, 0.0) - a.get(name, 0.0)

hashes = set()
rows = []
for r in range(daemons):
    a = metrics(f'{work}/metrics.timed.{r}')
    b = metrics(f'{work}/metrics.done.{r}')
    ws = []
    for w in range(workers):
        line = open(f'{work}/worker{r}.{w}.out').read().strip()
        ws.append(dict(kv.split('=', 1) for kv in line.split()))
        hashes.add(ws[-1]['params_fnv'])
    med = lambda key: max(float(x[key]) for x in ws)
    n = diff(a, b, 'starling_node_steps_total')
    copied = {p: diff(a, b, f'starling_node_copied_bytes_total{{phase="{p}"}}') / max(n, 1) / 1e6
              for p in ('local_reduce', 'allreduce_staging', 'pull')}
    step_mean = diff(a, b, 'starling_node_step_seconds_sum') / max(diff(a, b, 'starling_node_step_seconds_count'), 1) * 1e3
    replication = diff(a, b, 'starling_node_replication_seconds_total') / max(n, 1) * 1e3
    written = diff(a, b, 'starling_node_checkpoints_written_total')
    writing = diff(a, b, 'starling_node_checkpoint_seconds_total') / max(n, 1) * 1e3
    waited = diff(a, b, 'starling_node_checkpoint_wait_seconds_total') / max(n, 1) * 1e3
    rows.append((r, ws[0]['rank'], med('step_ms'), med('pull_ms'), med('push_ms'), med('grad_ms'),
                 step_mean, replication, int(n), int(written), writing, waited,
                 copied['local_reduce'], copied['pull'], copied['allreduce_staging'],
                 sum(copied.values())))
print()
print('| daemon (rank) | step median ms | pull median ms | push median ms | gradient median ms | daemon step mean ms | replication mean ms | steps | checkpoints | writing ms/step | waited ms/step | copied MB/step: local reduce | pull | all-reduce staging | total |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
for row in rows:
    print('| node%d (%s) | %.2f | %.2f | %.2f | %.2f | %.3f | %.3f | %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |' % row)
print()
print('medians: per worker over the timed steps; the row shows the larger of its workers. copied: bytes read + written by the daemon (starling_node_copied_bytes_total), 1 MB = 1e6 bytes')
t0, b0, o0 = map(int, open(f'{work}/cpu.timed').read().split())
t1, b1, o1 = map(int, open(f'{work}/cpu.done').read().split())
print('CPU during the timed steps: this job %.0f%%, other processes %.0f%% of the machine'
      % (100.0 * (o1 - o0) / max(t1 - t0, 1), 100.0 * (b1 - b0 - (o1 - o0)) / max(t1 - t0, 1)))
print('final parameters fnv1a:', ', '.join(sorted(hashes)),
      '(identical on every worker)' if len(hashes) == 1 else 'MISMATCH between workers')
EOF
