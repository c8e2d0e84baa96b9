#!/usr/bin/env bash
# Training benchmark: starling-worker trains Fashion-MNIST inside the
# simulated cluster of ../shared/peerbench (network namespaces h0..h3, one
# rate-limited NIC each): a coordinator on the unshaped control host, one
# starling-node daemon per host, one starling-worker per daemon. One run per
# (model, mode, overlap); each prints the workers' per-epoch table, and the
# script ends with one summary row per run: time per epoch, test accuracy
# after the last epoch, compute ratio (the workers' forward/backward time
# over step time, mean of the epochs), bytes host 0's NIC sent per step
# (its daemon's collectives, TCP/IP headers included), staleness observed
# (mean and max over the workers' pushes). Needs root (ip netns, tc).
#
#   tests/bench/train_bench.sh                                  # the recorded table
#   tests/bench/train_bench.sh --models mlp --modes sync_sgd --epochs 1
#   tests/bench/train_bench.sh --rate none --hosts 2
#   tests/bench/train_bench.sh --models mlp --overlap on \
#       --modes "sync_sgd sync_easgd async_easgd" --taus "1 4 16 64"
#
# Options: --models "mlp cnn" --modes "sync_sgd async_sgd parameter_server"
# (or any EASGD mode: sync_easgd async_easgd async_measgd hogwild_easgd
# round_robin_easgd, each run once per --taus value, default "4", with
# --easgd-lr (default --lr) as the workers' local rate, async_measgd with
# --measgd-lr, default --lr / 100, and Nesterov momentum 0.99)
# --overlap "on off" (on: the default bucket size; off: --bucket_bytes 0,
# one push after backward; a number: that bucket size, for sweeps)
# --epochs E (mlp 10, cnn 3; or "mlp:10,cnn:3") --rate 1gbit --hosts 4
# --batch 64 --lr 0.05 --optimizer momentum --staleness 1 --dtype float32
# --train-limit N (0: all 60000) --replicas R (the coordinator's
# --replicas, default 1: each shard also on a buddy) --out CSV (default
# tests/bench/results/train_<date>.csv) --bin DIR (holding
# starling-coordinator, starling-node, starling-worker; default: build -c opt)
# --keep (keep the logs). Every process it starts is stopped by pid on exit;
# the simulated cluster is taken down.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PEERBENCH_SRC=${PEERBENCH_SRC:-$REPO/../shared/peerbench}
MODELS="mlp cnn" MODES="sync_sgd async_sgd parameter_server" OVERLAP="on off"
EPOCHS="mlp:10,cnn:3" RATE=1gbit HOSTS=4 BATCH=64 LR=0.05 OPTIMIZER=momentum
STALENESS=1 DTYPE=float32 TRAIN_LIMIT=0 BIN="" KEEP=0 BUILT_BIN=""
TAUS=4 EASGD_LR="" MEASGD_LR="" REPLICAS=1
OUT=$REPO/tests/bench/results/train_$(date +%Y%m%d_%H%M%S).csv
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --overlap) OVERLAP=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --lr) LR=$2; shift 2 ;;
    --optimizer) OPTIMIZER=$2; shift 2 ;;
    --staleness) STALENESS=$2; shift 2 ;;
    --taus) TAUS=$2; shift 2 ;;
    --easgd-lr) EASGD_LR=$2; shift 2 ;;
    --measgd-lr) MEASGD_LR=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --train-limit) TRAIN_LIMIT=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n 2,30p "$0"; exit 0 ;;
    *) echo "train_bench.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ -n $EASGD_LR ]] || EASGD_LR=$LR
[[ -n $MEASGD_LR ]] || MEASGD_LR=$(awk -v l="$LR" 'BEGIN { print l / 100 }')
[[ $(id -u) -eq 0 ]] || { echo "train_bench.sh: needs root for ip netns and tc" >&2; exit 2; }
"$REPO/deploy/setup.sh" --bench >/dev/null
[[ -d $PEERBENCH_SRC ]] || { echo "train_bench.sh: no peerbench at $PEERBENCH_SRC (set PEERBENCH_SRC)" >&2; exit 2; }

epochs_of() {  # model -> epochs
  local e
  if [[ $EPOCHS =~ ^[0-9]+$ ]]; then echo "$EPOCHS"; return; fi
  e=$(tr ',' '\n' <<< "$EPOCHS" | sed -n "s/^$1://p")
  echo "${e:-1}"
}

if [[ -z $BIN ]]; then
  echo "== building (-c opt)"
  (cd "$REPO" && bazel build --config=ci -c opt //server/coordinator:starling-coordinator \
      //server/node:starling-node //worker/trainer:starling-worker >/dev/null)
  OPT_BIN=$(cd "$REPO" && bazel info --config=ci -c opt bazel-bin 2>/dev/null)
  BIN=$(mktemp -d /tmp/train_bench_bin.XXXXXX)
  BUILT_BIN=$BIN
  cp "$OPT_BIN/server/coordinator/starling-coordinator" "$OPT_BIN/server/node/starling-node" \
     "$OPT_BIN/worker/trainer/starling-worker" "$BIN/"
fi
for b in starling-coordinator starling-node starling-worker; do
  [[ -x $BIN/$b ]] || { echo "train_bench.sh: no $BIN/$b" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/train_bench.XXXXXX)
PB=$WORK/peerbench
cp -r "$PEERBENCH_SRC" "$PB" && chmod -R u+w "$PB"
PIDS=()
stop_pids() {
  local p
  for p in "${PIDS[@]:-}"; do [[ -n $p ]] && kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [[ -n $p ]] && wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() {
  stop_pids
  (cd "$PB" && ./cluster.sh down >/dev/null 2>&1) || true
  [[ -z $BUILT_BIN ]] || rm -rf "$BUILT_BIN"
  if [[ $KEEP == 1 ]]; then echo "logs: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "== simulated cluster: $HOSTS hosts, $RATE each"
(cd "$PB" && ./cluster.sh up "$HOSTS" "$RATE" >/dev/null)
for ((h = 0; h < HOSTS; h++)); do ip netns exec "h$h" ip link set lo up; done
head -c 32 /dev/urandom > "$WORK/secret"
chmod 600 "$WORK/secret"
CTL=10.77.0.254
SAMPLES=60000
[[ $TRAIN_LIMIT -gt 0 ]] && SAMPLES=$TRAIN_LIMIT
PARTITIONS=$(( (SAMPLES + BATCH - 1) / BATCH ))

# Bytes host $1's NIC sent so far (everything: TCP/IP headers included).
tx_bytes() {
  ip netns exec "h$1" awk -F'[: ]+' '$2 == "nic0" { print $11 }' /proc/net/dev
}

mkdir -p "$(dirname "$OUT")"
echo "model,mode,tau,overlap,hosts,rate,dtype,epochs,seconds_per_epoch,test_accuracy,compute_ratio,comm_share,bytes_sent_per_step,bytes_sent_per_epoch,staleness_mean,staleness_max,steps" > "$OUT"
run=0
for model in $MODELS; do
  E=$(epochs_of "$model")
  for mode in $MODES; do
    taus=-
    mode_flags=(--optimizer "$OPTIMIZER" --learning_rate "$LR")
    if [[ $mode == *easgd ]]; then
      taus=$TAUS
      mode_flags=(--optimizer easgd --learning_rate "$EASGD_LR")
      [[ $mode == async_measgd ]] && mode_flags=(--optimizer easgd --learning_rate "$MEASGD_LR")
    fi
    for tau in $taus; do
    for overlap in $OVERLAP; do
      run=$((run + 1))
      port=$((29400 + 20 * run))
      dir=$WORK/$model.$mode.$tau.$overlap
      tau_flags=()
      [[ $tau != - ]] && tau_flags=(--elastic_tau "$tau")
      mkdir -p "$dir"
      bucket=()
      [[ $overlap == off ]] && bucket=(--bucket_bytes 0)
      [[ $overlap =~ ^[0-9]+$ ]] && bucket=(--bucket_bytes "$overlap")
      echo
      echo "== $model, $mode, tau $tau, overlap $overlap: $HOSTS daemons x 1 worker, $E epoch(s)"
      ip netns exec pbctl "$BIN/starling-coordinator" --job_id bench --expected_nodes "$HOSTS" \
        --listen "$CTL:$port" --cluster_secret_file "$WORK/secret" \
        --metrics_port $((port + 1)) --mode "$mode" \
        --staleness "$STALENESS" --replicas "$REPLICAS" "${mode_flags[@]}" "${tau_flags[@]}" \
        --epochs "$E" --partitions_per_epoch "$PARTITIONS" --log_level warning \
        > "$dir/coordinator.log" 2>&1 &
      PIDS+=($!)
      for ((h = 0; h < HOSTS; h++)); do
        ip netns exec "h$h" "$BIN/starling-node" --coordinator "$CTL:$port" --job_id bench \
          --hostname "h$h" --data_address "10.77.0.$((h + 1))" --data_port 29500 \
          --admin_port 29600 --metrics_port 29701 --worker_socket "$dir/h$h.sock" \
          --cluster_secret_file "$WORK/secret" --local_workers 1 --log_level warning \
          > "$dir/node$h.log" 2>&1 &
        PIDS+=($!)
      done
      workers=()
      tx0=$(tx_bytes 0)
      start=$(date +%s.%N)
      for ((h = 0; h < HOSTS; h++)); do
        table=()
        [[ $h -eq 0 ]] && table=(--epochs_table "$dir/epochs.csv")
        ip netns exec "h$h" "$BIN/starling-worker" --socket "$dir/h$h.sock" --worker_index 0 \
          --model "$model" --batch_size "$BATCH" --dtype "$DTYPE" --train_limit "$TRAIN_LIMIT" \
          "${bucket[@]}" "${table[@]}" --progress_interval 30s > "$dir/worker$h.out" 2>&1 &
        workers+=($!)
      done
      failed=0
      for p in "${workers[@]}"; do wait "$p" || failed=$((failed + 1)); done
      seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { print e - s }')
      cat "$dir/worker0.out"
      if [[ $failed -ne 0 ]]; then
        echo "train_bench.sh: $failed worker(s) failed in $model/$mode/$overlap:" >&2
        tail -5 "$dir"/worker*.out "$dir"/node*.log >&2
        stop_pids
        continue
      fi
      sent=$(( $(tx_bytes 0) - tx0 ))
      stop_pids
      # The table's last row: accuracy; staleness max from the worker's table.
      python3 - "$dir/epochs.csv" "$OUT" "$model" "$mode" "$tau" "$overlap" "$HOSTS" "$RATE" \
        "$DTYPE" "$E" "$seconds" "$sent" "$PARTITIONS" <<'EOF'
import csv, math, sys
(table, out, model, mode, tau, overlap, hosts, rate, dtype, epochs, seconds,
 sent, partitions) = sys.argv[1:]
rows = list(csv.DictReader(open(table)))
last = rows[-1] if rows else {}
def floats(name):
    return [float(r[name]) for r in rows if r.get(name, "") != ""]
epoch_seconds = floats("epoch_seconds")
per_epoch = (sum(epoch_seconds) / len(epoch_seconds) if epoch_seconds
             else float(seconds) / float(epochs))
# Steps of the run: iterations per epoch x epochs (every mode).
steps = math.ceil(int(partitions) / int(hosts)) * int(epochs)
ratios = floats("compute_ratio")
ratio = sum(ratios) / len(ratios) if ratios else 0
stale = floats("staleness_mean")
with open(out, "a") as f:
    f.write(",".join([
        model, mode, tau, overlap, hosts, rate, dtype, epochs, "%.2f" % per_epoch,
        last.get("test_accuracy", ""), "%.3f" % ratio, "%.3f" % (1 - ratio),
        "%.0f" % (float(sent) / steps), "%.0f" % (float(sent) / int(epochs)),
        "%.2f" % (sum(stale) / len(stale) if stale else 0),
        "%.0f" % max(floats("staleness_max") or [0]), str(steps)]) + "\n")
EOF
    done
    done
  done
done
echo
echo "== summary ($OUT)"
column -t -s, "$OUT" 2>/dev/null || cat "$OUT"
