#!/usr/bin/env bash
# README command (a): builds everything (optimised) and runs Starling on this
# machine: a 4-node training job on loopback (coordinator, 4 node daemons,
# 2 workers each, synchronous SGD through the client library), then the
# collectives benchmark with every result checked against the fp64
# reference, then the CUDA device query.
#
#   deploy/demo.sh             4 nodes / ranks
#   RANKS=8 deploy/demo.sh     another group size
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}

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
echo "=== training: coordinator + ${RANKS} node daemons x 2 workers on 127.0.0.1, sync SGD, Adam ==="
WORK=$(mktemp -d /tmp/starling-demo.XXXXXX)
BASE=29800
"$BIN/server/coordinator/starling-coordinator" --job_id demo --expected_nodes "$RANKS" \
  --parameter_count 100000 --optimizer adam --learning_rate 0.05 \
  --listen 127.0.0.1:$BASE --metrics_port $((BASE + 1)) --log_level warning \
  > "$WORK/coordinator.log" 2>&1 &
PIDS+=($!)
for ((r = 0; r < RANKS; r++)); do
  "$BIN/server/node/starling-node" --coordinator 127.0.0.1:$BASE --job_id demo \
    --hostname "node$r" --data_port $((BASE + 10 + r)) --admin_port $((BASE + 30 + r)) \
    --metrics_port $((BASE + 50 + r)) --worker_socket "$WORK/node$r.sock" \
    --local_workers 2 --log_level warning > "$WORK/node$r.log" 2>&1 &
  PIDS+=($!)
done
WORKERS=()
for ((r = 0; r < RANKS; r++)); do
  for w in 0 1; do
    timeout 120 "$BIN/worker/examples/quadratic_worker" --worker_socket "$WORK/node$r.sock" \
      --worker_index $w --dim 100000 --steps 200 --summary > "$WORK/worker$r.$w.out" 2>&1 &
    WORKERS+=($!)
  done
done
failed=0
for p in "${WORKERS[@]}"; do wait "$p" || failed=$((failed + 1)); done
cat "$WORK"/worker*.out
"$BIN/server/coordinator/starlingctl" status --coordinator 127.0.0.1:$BASE --job_id demo || true
if [[ $failed -ne 0 ]]; then
  echo "training: $failed worker(s) failed; logs in $WORK" >&2
  exit 1
fi
echo "Every worker ends on the same parameters: the daemons reduce the 8"
echo "workers' gradients, each applies Adam to its quarter (its shard), and all"
echo "gather the result. Logs: $WORK"

echo
echo "=== run 2 on the same daemons: worker 0 of node 0 is killed (kill -9) after 1 s ==="
echo "    and started again with the same index; it resumes at the run's step"
WORKERS=()
for ((r = 0; r < RANKS; r++)); do
  for w in 0 1; do
    # The worker to be killed runs without `timeout` so that kill -9 hits it.
    wrap=(timeout 120)
    [[ $r -eq 0 && $w -eq 0 ]] && wrap=()
    "${wrap[@]}" "$BIN/worker/examples/quadratic_worker" --worker_socket "$WORK/node$r.sock" \
      --worker_index $w --dim 100000 --steps 200 --step_delay 20ms --summary \
      > "$WORK/run2.worker$r.$w.out" 2>&1 &
    WORKERS+=($!)
  done
done
sleep 1
kill -9 "${WORKERS[0]}" 2>/dev/null || true
wait "${WORKERS[0]}" 2>/dev/null || true
timeout 120 "$BIN/worker/examples/quadratic_worker" --worker_socket "$WORK/node0.sock" \
  --worker_index 0 --dim 100000 --steps 200 --step_delay 20ms --summary \
  > "$WORK/run2.worker0.0.out" 2>&1 &
WORKERS[0]=$!
failed=0
for p in "${WORKERS[@]}"; do wait "$p" || failed=$((failed + 1)); done
cat "$WORK"/run2.worker*.out
"$BIN/server/coordinator/starlingctl" status --coordinator 127.0.0.1:$BASE --job_id demo || true
if [[ $failed -ne 0 ]]; then
  echo "run 2: $failed worker(s) failed; logs in $WORK" >&2
  exit 1
fi
if ! diff -q <(cat "$WORK"/worker*.out) <(cat "$WORK"/run2.worker*.out) > /dev/null; then
  echo "run 2 ended on other parameters than run 1; logs in $WORK" >&2
  exit 1
fi
echo "Run 2 (new workers, one killed and replaced, daemons and coordinator not"
echo "restarted) ends on exactly the parameters of run 1."

echo
echo "=== all-reduce: ${RANKS} ranks (processes) on 127.0.0.1, TCP, float32 sum ==="
echo "    every algorithm; --check compares every element with the fp64 reference"
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e5,1e6,1e7 --algo all --check

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
