#!/usr/bin/env bash
# DistributedDataParallel step time: torch.distributed's "starling" backend
# against its Gloo backend, and against Starling's own DistributedOptimizer,
# on the same models in a simulated cluster: N hosts, each a network
# namespace with one NIC shaped to RATE both ways (htb on its nic and on
# its switch port, as ../shared/peerbench/cluster.sh does; the namespaces
# come from tests/fault/netns.sh), a coordinator on an unshaped control
# host, one starling-node and one worker per host. Per repetition, per
# model, each mode runs once (the order rotates from one repetition to the
# next); every run starts its own coordinator and daemons:
#
#   gloo      DDP on the Gloo backend (env://, torch's TCPStore on host 0)
#   starling  DDP on the starling backend (import starling.torch)
#   dopt      starling.torch.DistributedOptimizer (job --optimizer none)
#   local     no exchange at all: the compute floor with every worker
#             computing at once on the same cores
#
# Models: lenet (worker/examples/pytorch/train.py's, 61,706 parameters) and
# resnet18 (torchvision's resnet18(), 11,689,512 parameters, on 3 x 32 x 32
# synthetic inputs; a copy defined in the worker without python3-torchvision).
# Each worker: torch SGD momentum 0.9, one torch thread, W untimed steps,
# then S timed steps; tests/bench/ddp_bench_worker.py. The report
# (tests/bench/ddp_bench_report.py) prints the table and writes the CSV:
# the median of every worker's timed steps, its spread over the
# repetitions, bytes per step (the gradient's, what each host's nic sent,
# what its daemon sent), CPU per step, and the ratios starling/gloo and
# starling/dopt.
#
#   tests/bench/ddp_bench.sh --quiet-wait 900    # tests/bench/DDP.md (~12 min)
#   tests/bench/ddp_bench.sh --models lenet --reps 1 --lenet-steps 100
#   tests/bench/ddp_bench.sh --hosts 2 --rate 10gbit --modes "gloo starling"
#
# Options: --hosts N (4) --rate R (1gbit; "none": unshaped) --reps R (3)
# --models "lenet resnet18" --modes "gloo starling dopt local"
# --lenet-steps S (300) --lenet-batch B (32) --resnet-steps S (20)
# --resnet-batch B (16) --image-size P (32) --warmup-lenet W (20)
# --warmup-resnet W (3) --bucket-mb M (DDP's bucket_cap_mb and the
# optimizer's bucket_bytes; default: each one's own, 25 MB and 256 KiB)
# --pin on|off (off: worker i on core i % nproc with on) --out CSV
# (tests/bench/results/ddp_bench.csv) --bin DIR (an opt bazel-bin with
# server/coordinator/starling-coordinator, server/node/starling-node and
# client/python/starling-run's runfiles; default: built here, --config=opt)
# --keep (leave the logs) --step-bound S (5: each run's `timeout` is 60 s +
# S per step) --trace (DDP modes: all-reduce through a comm hook equal to
# DDP's default that records when each bucket is launched and done; the
# report adds a table of the buckets' timing). The machine may be shared
# (other builds and tests on its cores): --quiet-wait S (300) --quiet-busy
# F (0.15): before each run, wait up to S seconds for 2 s in which it is
# less than F busy; --max-other F (0.1) --retries K (2): repeat a run, up
# to K times, while the CPU time that its workers and daemons were not
# charged for exceeds F of the machine over its timed steps (the attempt
# least disturbed is kept; the CSV keeps that share, other_busy).
#
# Needs root (ip netns, tc), iproute2 and ping (deploy/setup.sh --bench).
# Every process runs under `timeout` and is stopped by its pid; the
# namespaces are removed on exit. The binaries and the Python package are
# copied to a scratch folder first, so a rebuild meanwhile does not change
# what runs.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
HOSTS=4 RATE=1gbit REPS=3 MODELS="lenet resnet18" MODES="gloo starling dopt local"
LENET_STEPS=300 LENET_BATCH=32 RESNET_STEPS=20 RESNET_BATCH=16 IMAGE=32
LENET_WARMUP=20 RESNET_WARMUP=3 BUCKET_MB="" PIN=off BIN="" KEEP=0
QUIET_WAIT=300 QUIET_BUSY=0.15 MAX_OTHER=0.1 RETRIES=2 STEP_BOUND=5 TRACE=0
OUT=$REPO/tests/bench/results/ddp_bench.csv
while [[ $# -gt 0 ]]; do
  case "$1" in
    --hosts) HOSTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --lenet-steps) LENET_STEPS=$2; shift 2 ;;
    --lenet-batch) LENET_BATCH=$2; shift 2 ;;
    --resnet-steps) RESNET_STEPS=$2; shift 2 ;;
    --resnet-batch) RESNET_BATCH=$2; shift 2 ;;
    --image-size) IMAGE=$2; shift 2 ;;
    --warmup-lenet) LENET_WARMUP=$2; shift 2 ;;
    --warmup-resnet) RESNET_WARMUP=$2; shift 2 ;;
    --bucket-mb) BUCKET_MB=$2; shift 2 ;;
    --pin) PIN=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    --keep) KEEP=1; shift ;;
    --quiet-wait) QUIET_WAIT=$2; shift 2 ;;
    --quiet-busy) QUIET_BUSY=$2; shift 2 ;;
    --max-other) MAX_OTHER=$2; shift 2 ;;
    --retries) RETRIES=$2; shift 2 ;;
    --step-bound) STEP_BOUND=$2; shift 2 ;;
    --trace) TRACE=1; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/{exit} NR > 1' "$0"; exit 0 ;;
    *) echo "ddp_bench.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
die() { echo "ddp_bench.sh: $*" >&2; exit 2; }
[[ $(id -u) == 0 ]] || die "needs root (network namespaces, tc)"
for c in ip tc ping taskset timeout; do
  command -v "$c" >/dev/null || die "no $c (deploy/setup.sh --bench installs what is missing)"
done
if ! [[ $HOSTS =~ ^[0-9]+$ ]] || ((HOSTS < 2 || HOSTS > 16)); then die "--hosts must be 2..16"; fi
for m in $MODELS; do [[ $m == lenet || $m == resnet18 ]] || die "unknown model $m"; done
for m in $MODES; do [[ $m =~ ^(gloo|starling|dopt|local)$ ]] || die "unknown mode $m"; done
[[ $PIN == on || $PIN == off ]] || die "--pin on or off"
PY=/usr/bin/python3

if [[ -z $BIN ]]; then
  echo "== building (--config=opt)"
  BUILD_LOG=$(mktemp /tmp/ddp_bench_build.XXXXXX)
  # --symlink_prefix=/: leave the bazel-bin symlink (fastbuild) alone.
  (cd "$REPO" && timeout 3600 bazel build --config=ci --config=opt --symlink_prefix=/ \
      //client/python:starling-run //server/coordinator:starling-coordinator \
      //server/node:starling-node >"$BUILD_LOG" 2>&1) ||
    { echo "ddp_bench.sh: the build failed:" >&2; tail -20 "$BUILD_LOG" >&2; exit 1; }
  rm -f "$BUILD_LOG"
  BIN=$(cd "$REPO" && bazel info --config=ci --config=opt bazel-bin 2>/dev/null)
fi
PKG=$BIN/client/python/starling-run.runfiles/starling/client/python/starling
for f in "$BIN/server/coordinator/starling-coordinator" "$BIN/server/node/starling-node" \
         "$PKG/torch/distributed.py" "$PKG/torch/_backend.so"; do
  [[ -e $f ]] || die "no $f (build //client/python:starling-run with --config=opt, or pass --bin)"
done

WORK=$(mktemp -d /tmp/ddp_bench.XXXXXX)
mkdir -p "$WORK/bin" "$WORK/py" "$WORK/runs" "$WORK/attempts"
cp "$BIN/server/coordinator/starling-coordinator" "$BIN/server/node/starling-node" "$WORK/bin/"
cp -rL "$PKG" "$WORK/py/starling"
cp "$REPO/worker/examples/pytorch/lenet.py" "$WORK/py/"
cp "$REPO/tests/bench/ddp_bench_worker.py" "$REPO/tests/bench/ddp_bench_report.py" "$WORK/"
COORD=$WORK/bin/starling-coordinator
NODE=$WORK/bin/starling-node
head -c 32 /dev/urandom | base64 > "$WORK/secret"
chmod 600 "$WORK/secret"

NET=10.83.0
PREFIX=ddpb
N=$HOSTS
netns_shape() {  # namespace device: htb at RATE, as peerbench's cluster.sh
  [[ $RATE == none ]] && return
  local bps burst
  bps=$(/usr/bin/python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
if not m: sys.exit("ddp_bench.sh: --rate %s: use kbit, mbit or gbit" % sys.argv[1])
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8))' "$RATE")
  # burst: 0.25 ms worth of bytes, at least 64 KiB (one GSO super-packet)
  burst=$((bps / 4000 > 65536 ? bps / 4000 : 65536))
  ip netns exec "$1" tc qdisc add dev "$2" root handle 1: htb default 10 r2q 1000
  ip netns exec "$1" tc class add dev "$2" parent 1: classid 1:10 htb rate "$RATE" \
    ceil "$RATE" burst "$burst" cburst "$burst" quantum 200000
  ip netns exec "$1" tc qdisc add dev "$2" parent 1:10 handle 10: pfifo limit 10000
}
# shellcheck source=tests/fault/netns.sh
source "$REPO/tests/fault/netns.sh"

# Stops the processes of PIDS (each a `timeout` whose command it relays
# TERM to): TERM, up to 5 s, then KILL to what is left and its children.
stop_started() {
  local p c kids
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local left=0
    for p in "${PIDS[@]}"; do alive "$p" && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do
    if alive "$p"; then
      kids=(); read -r -a kids < <(cat /proc/"$p"/task/*/children 2>/dev/null) || true
      for c in "${kids[@]}"; do kill -KILL "$c" 2>/dev/null || true; done
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_started
  netns_down
  if ((KEEP)); then echo "ddp_bench.sh: logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

netns_down
netns_up
echo "== $N hosts (${PREFIX}0..$((N - 1)), $NET.1..$N), rate $RATE both ways, coordinator on $NET.254"

NCPU=$(nproc)
PORT=30000
FAILED=0
BEFORE=0

# The machine's busy and total jiffies (/proc/stat's first line).
jiffies() { awk '/^cpu /{b=$2+$3+$4+$7+$8+$9; print b, b+$5+$6; exit}' /proc/stat; }
# busy_fraction B0 T0 B1 T1
busy_fraction() { awk -v b0="$1" -v t0="$2" -v b1="$3" -v t1="$4" \
  'BEGIN{printf "%.3f", (t1 > t0) ? (b1 - b0) / (t1 - t0) : 0}'; }
# The machine is shared (other builds and tests may run on its cores):
# before each run, wait up to QUIET_WAIT seconds for a 2-second window in
# which it is less than QUIET_BUSY busy; prints that window's busy fraction.
wait_quiet() {
  local end=$(($(date +%s) + QUIET_WAIT)) b0 t0 b1 t1 busy
  while true; do
    read -r b0 t0 < <(jiffies)
    sleep 2
    read -r b1 t1 < <(jiffies)
    busy=$(busy_fraction "$b0" "$t0" "$b1" "$t1")
    if awk -v b="$busy" -v q="$QUIET_BUSY" 'BEGIN{exit !(b < q)}' || (($(date +%s) >= end)); then
      echo "$busy"
      return
    fi
  done
}

# run MODEL MODE REP: one job, repeated (up to RETRIES more times) while
# other processes took more than MAX_OTHER of the machine during its timed
# steps; the attempt they disturbed least is kept: its workers' files
# MODEL.MODE.REP.<rank>.json go to $WORK/runs, with MODEL.MODE.REP.machine
# (the machine's busy fraction before it, and the attempts made).
run() {
  local model=$1 mode=$2 rep=$3 attempt other best=0 best_other=2 befores=()
  local tag=$1.$2.$3
  for ((attempt = 1; attempt <= RETRIES + 1; attempt++)); do
    run_once "$model" "$mode" "$rep" "$attempt" || return 0
    befores[attempt]=$BEFORE
    mkdir -p "$WORK/attempts/$tag.$attempt"
    mv "$WORK/runs/$tag".*.json "$WORK/attempts/$tag.$attempt/"
    other=$("$PY" "$WORK/ddp_bench_report.py" --other "$WORK/attempts/$tag.$attempt"/*.json)
    if awk -v o="$other" -v b="$best_other" 'BEGIN{exit !(o < b)}'; then
      best=$attempt best_other=$other
    fi
    awk -v o="$other" -v m="$MAX_OTHER" 'BEGIN{exit !(o <= m)}' && break
    if ((attempt <= RETRIES)); then
      echo "   (other processes took $other of the machine during the run: again)"
    fi
  done
  ((attempt > RETRIES + 1)) && attempt=$((RETRIES + 1))
  cp "$WORK/attempts/$tag.$best"/*.json "$WORK/runs/"
  echo "${befores[best]} $attempt" > "$WORK/runs/$tag.machine"
  if ((best != attempt)); then
    echo "   kept attempt $best of $attempt (other processes took $best_other of the machine)"
  fi
}

# run_once MODEL MODE REP ATTEMPT: one job; returns 1 if it failed. Sets
# BEFORE, the machine's busy fraction just before it.
run_once() {
  local model=$1 mode=$2 rep=$3 attempt=$4 steps batch warmup
  if [[ $model == lenet ]]; then
    steps=$LENET_STEPS batch=$LENET_BATCH warmup=$LENET_WARMUP
  else
    steps=$RESNET_STEPS batch=$RESNET_BATCH warmup=$RESNET_WARMUP
  fi
  local tag=$model.$mode.$rep dir=$WORK/runs/$model.$mode.$rep
  rm -rf "$dir" "$WORK/runs/$tag".*.json
  mkdir -p "$dir"
  BEFORE=$(wait_quiet)
  if awk -v b="$BEFORE" -v q="$QUIET_BUSY" 'BEGIN{exit !(b >= q)}'; then
    echo "   (the machine is still $BEFORE busy after ${QUIET_WAIT} s: measuring anyway)"
  fi
  PORT=$((PORT + 20))
  local i
  # A generous bound per run: 60 s to start + 5 s per step (a ResNet-18
  # step takes ~1.2 s at 1 Gbit/s, ~6 s at 100 Mbit/s: raise it there).
  local bound=$((60 + (steps + warmup) * STEP_BOUND))
  if [[ $mode == starling || $mode == dopt ]]; then
    timeout -k 5 "$((bound + 30))" ip netns exec "$CTL" "$COORD" --job_id="$tag.$attempt" \
      --expected_nodes="$N" --listen="$NET.254:$PORT" --metrics_port=0 \
      --optimizer=none --heartbeat_timeout=30s --collective_timeout=120s \
      --cluster_secret_file="$WORK/secret" --log_level=warning \
      > "$dir/coordinator.log" 2>&1 &
    PIDS+=($!)
    for ((i = 0; i < N; i++)); do
      timeout -k 5 "$((bound + 30))" ip netns exec "$PREFIX$i" "$NODE" \
        --coordinator="$NET.254:$PORT" --job_id="$tag.$attempt" --hostname="node$i" \
        --data_address="$NET.$((i + 1))" --data_port=$((PORT + 1)) \
        --admin_port=0 --metrics_port=$((PORT + 2)) \
        --worker_socket="$dir/node$i.sock" --local_workers=1 \
        --cluster_secret_file="$WORK/secret" --timeout=60s \
        --log_level=warning > "$dir/node$i.log" 2>&1 &
      PIDS+=($!)
    done
  fi
  local wpids=() pin=() bucket=()
  [[ -n $BUCKET_MB ]] && bucket=(--bucket_mb "$BUCKET_MB")
  ((TRACE)) && bucket+=(--trace_buckets)
  for ((i = 0; i < N; i++)); do
    [[ $PIN == on ]] && pin=(taskset -c $((i % NCPU)))
    timeout -k 5 "$bound" ip netns exec "$PREFIX$i" env \
      RANK=$i WORLD_SIZE="$N" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="$NET.1" MASTER_PORT=$((PORT + 3)) GLOO_SOCKET_IFNAME=nic0 \
      STARLING_SOCKET="$dir/node$i.sock" STARLING_WORKER_INDEX=0 \
      STARLING_CONNECT_TIMEOUT=30 STARLING_TIMEOUT=120 \
      PYTHONPATH="$WORK/py" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 \
      "${pin[@]}" "$PY" "$WORK/ddp_bench_worker.py" --mode "$mode" --model "$model" \
      --steps "$steps" --warmup "$warmup" --batch "$batch" --image_size "$IMAGE" \
      "${bucket[@]}" --metrics_url "http://$NET.$((i + 1)):$((PORT + 2))/metrics" \
      --out "$WORK/runs/$tag" > "$dir/worker$i.log" 2>&1 &
    wpids+=($!)
    PIDS+=($!)
  done
  local rc=0 p
  for p in "${wpids[@]}"; do wait "$p" || rc=$?; done
  stop_started
  if ((rc != 0)); then
    echo "ddp_bench.sh: $tag failed (exit $rc); the last lines of its logs:" >&2
    for f in "$dir"/*.log; do echo "--- $f" >&2; tail -n 8 "$f" >&2; done
    FAILED=$((FAILED + 1))
    return 1
  fi
  "$PY" "$WORK/ddp_bench_report.py" --brief "$WORK/runs/$tag".*.json
}

read -r -a mode_list <<< "$MODES"
START=$(date +%s)
for ((rep = 1; rep <= REPS; rep++)); do
  # Rotate the order: each mode runs first in some repetition.
  k=$(((rep - 1) % ${#mode_list[@]}))
  order=("${mode_list[@]:k}" "${mode_list[@]:0:k}")
  for model in $MODELS; do
    for mode in "${order[@]}"; do
      echo "== rep $rep: $model, $mode"
      run "$model" "$mode" "$rep"
    done
  done
done
echo "== $(($(date +%s) - START)) s of runs, $FAILED failed"
mkdir -p "$(dirname "$OUT")"
"$PY" "$WORK/ddp_bench_report.py" --csv "$OUT" --max_other "$MAX_OTHER" \
  --context "hosts=$N rate=$RATE pin=$PIN cores=$NCPU bucket_mb=${BUCKET_MB:-default} resnet_input=3x${IMAGE}x${IMAGE} trace=$TRACE" \
  "$WORK"/runs/*.json
((FAILED == 0)) || exit 1
