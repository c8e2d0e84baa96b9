#!/usr/bin/env bash
# README command (a): builds everything (optimised) and runs Starling on this
# machine: a coordinator, 4 node daemons and 4 starling-workers on loopback
# train an MLP on Fashion-MNIST with synchronous SGD (test accuracy per
# epoch, compute ratio), then the collectives benchmark with every result
# checked against the fp64 reference, then the CUDA device query.
#
# The daemons share this machine, so by default (--transport=auto) they
# write to each other through shared memory; TRANSPORT=tcp puts them on TCP
# loopback instead.
#
#   deploy/demo.sh             4 nodes / ranks, 5 epochs
#   RANKS=2 EPOCHS=10 deploy/demo.sh
#   TRANSPORT=tcp EPOCHS=1 deploy/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}
TRANSPORT=${TRANSPORT:-auto}

echo "=== building everything (bazel build --config=opt //...) ==="
bazel build --config=opt --config=ci //...
BIN=$(bazel info --config=opt bazel-bin 2>/dev/null)

# Every process this script starts, stopped by pid at exit.
PIDS=()
stop_all() {
  local p
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && wait "$p" 2>/dev/null || true; done
  bazel shutdown >/dev/null 2>&1 || true
}
trap stop_all EXIT

echo
EPOCHS=${EPOCHS:-5}
BATCH=64
PARTITIONS=$(( (60000 + BATCH - 1) / BATCH ))
echo "=== training: coordinator + ${RANKS} node daemons x 1 starling-worker on 127.0.0.1 (--transport ${TRANSPORT}) ==="
echo "    Fashion-MNIST, MLP 784-256-128-10, synchronous SGD with momentum applied by"
echo "    the daemons to their shards, ${EPOCHS} epochs of 60000 images, batch ${BATCH} per worker"
WORK=$(mktemp -d /tmp/starling-demo.XXXXXX)
BASE=29800
"$BIN/server/coordinator/starling-coordinator" --job_id demo --expected_nodes "$RANKS" \
  --mode sync_sgd --optimizer momentum --learning_rate 0.05 --epochs "$EPOCHS" \
  --partitions_per_epoch "$PARTITIONS" --iterations_per_schedule 16 \
  --listen 127.0.0.1:$BASE --metrics_port $((BASE + 1)) --log_level warning \
  > "$WORK/coordinator.log" 2>&1 &
PIDS+=($!)
for ((r = 0; r < RANKS; r++)); do
  "$BIN/server/node/starling-node" --coordinator 127.0.0.1:$BASE --job_id demo \
    --hostname "node$r" --data_port $((BASE + 10 + r)) --admin_port $((BASE + 30 + r)) \
    --metrics_port $((BASE + 50 + r)) --worker_socket "$WORK/node$r.sock" \
    --local_workers 1 --transport "$TRANSPORT" --log_level warning \
    > "$WORK/node$r.log" 2>&1 &
  PIDS+=($!)
done
WORKERS=()
for ((r = 0; r < RANKS; r++)); do
  # Worker 0 prints the job's table; the others write theirs to files.
  if [[ $r -eq 0 ]]; then
    timeout 900 "$BIN/worker/trainer/starling-worker" --socket "$WORK/node$r.sock" \
      --worker_index 0 --model mlp --batch_size $BATCH --progress_interval 5s &
  else
    timeout 900 "$BIN/worker/trainer/starling-worker" --socket "$WORK/node$r.sock" \
      --worker_index 0 --model mlp --batch_size $BATCH --progress_interval 60s \
      > "$WORK/worker$r.out" 2>&1 &
  fi
  WORKERS+=($!)
done
failed=0
for p in "${WORKERS[@]}"; do wait "$p" || failed=$((failed + 1)); done
if [[ $failed -ne 0 ]]; then
  echo "training: $failed worker(s) failed; logs in $WORK" >&2
  tail -5 "$WORK"/*.out "$WORK"/*.log >&2 || true
  exit 1
fi
"$BIN/server/coordinator/starlingctl" status --coordinator 127.0.0.1:$BASE --job_id demo || true
echo "Each daemon holds 1/${RANKS} of the optimizer state (its shard) and the"
echo "workers' gradients cross the daemons in buckets while backward goes on."
echo "Compute ratio per daemon (starling_node_compute_ratio):"
for ((r = 0; r < RANKS; r++)); do
  printf '  node%d: ' "$r"
  curl -s --max-time 2 "http://127.0.0.1:$((BASE + 50 + r))/metrics" |
    awk '$1 == "starling_node_compute_ratio" { printf "%.3f\n", $2 }'
done
echo "Logs: $WORK"

echo
echo "=== all-reduce: ${RANKS} ranks (processes) on 127.0.0.1, TCP, float32 sum ==="
echo "    every algorithm; --check compares every element with the fp64 reference"
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e6,1e7 --algo all --check

echo
echo "=== the same all-reduce through shared memory (--transport shm): what co-located daemons use ==="
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e6,1e7 --check --transport shm

echo
echo "=== the same group, bfloat16 average, automatic algorithm choice ==="
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e6 --dtype bfloat16 --reduce average --check

echo
echo "=== GPU path: CUDA device query ==="
"$BIN/worker/gpu/starling-device-query"

echo
echo "Loopback shares this machine's cores between all ranks, so these are"
echo "software figures; tests/bench/RESULTS.md has the rate-limited cluster runs."
