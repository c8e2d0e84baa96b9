#!/usr/bin/env bash
# Runs Starling's CUDA paths on a machine with an NVIDIA GPU: the device
# query (saxpy bandwidth), the GPU tests (worker/gpu, the trainer's
# cuBLAS/cuDNN backend against the CPU one, a one-epoch smoke run), then
# starling-worker training Fashion-MNIST with 2 daemons x 1 worker on
# loopback, per model on the GPU and on the CPU, one CSV row per epoch.
#
#   bazel build --config=ci --config=cuda -c opt //worker/gpu/... \
#       //worker/train/... //worker/trainer:starling-worker \
#       //server/coordinator:starling-coordinator //server/node:starling-node
#   tests/bench/gpu_check.sh --bin DIR --out OUT [--gpu_epochs 3] [--cpu_epochs 1]
#
# DIR holds starling-device-query, gpu_device_test, gpu_backend_test,
# train_smoke_test, starling-worker (a --config=cuda build),
# starling-coordinator and starling-node; OUT receives the logs and
# epochs-DEVICE-MODEL.csv. Needs the CUDA runtime, cuBLAS and cuDNN 9 on the
# library path and Debian's Fashion-MNIST (deploy/setup.sh). Each worker is
# bounded (--worker_timeout, default 110 s); every process it starts is
# stopped on exit, by pid.
set -uo pipefail
BIN="" OUT="" GPU_EPOCHS=3 CPU_EPOCHS=1 WORKER_TIMEOUT=110 PORT_BASE=41400
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --gpu_epochs) GPU_EPOCHS=$2; shift 2 ;;
    --cpu_epochs) CPU_EPOCHS=$2; shift 2 ;;
    --worker_timeout) WORKER_TIMEOUT=$2; shift 2 ;;
    --port-base) PORT_BASE=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
done
[[ -n $BIN && -n $OUT ]] || { echo "gpu_check.sh: --bin DIR and --out OUT are needed" >&2; exit 2; }
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
failed=0
nvidia-smi -L || failed=1
echo "=== starling-device-query"
"$BIN/starling-device-query" || failed=1
for t in gpu_device_test gpu_backend_test train_smoke_test; do
  echo "=== $t"
  timeout 300 "$BIN/$t" >"$OUT/$t.log" 2>&1 || failed=1
  grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) *\]" "$OUT/$t.log"
done
# train DEVICE MODEL EPOCHS PORT: 2 daemons x 1 worker, sync SGD, momentum.
train() {
  local dev=$1 model=$2 epochs=$3 port=$4 servers=() workers=()
  "$BIN/starling-coordinator" --job_id gpu --expected_nodes 2 --mode sync_sgd \
      --optimizer momentum --learning_rate 0.05 --epochs "$epochs" \
      --partitions_per_epoch 938 --listen "127.0.0.1:$port" \
      --metrics_port $((port + 1)) --log_level warning 2>"$OUT/coordinator-$dev-$model.err" &
  servers+=($!)
  for r in 0 1; do
    "$BIN/starling-node" --coordinator "127.0.0.1:$port" --job_id gpu --hostname "node$r" \
        --data_port $((port + 10 + r)) --admin_port $((port + 20 + r)) \
        --metrics_port $((port + 30 + r)) --worker_socket "$OUT/node$r-$port.sock" \
        --local_workers 1 --log_level warning 2>"$OUT/node$r-$dev-$model.err" &
    servers+=($!)
  done
  PIDS+=("${servers[@]}")
  for r in 0 1; do
    timeout "$WORKER_TIMEOUT" "$BIN/starling-worker" --socket "$OUT/node$r-$port.sock" \
        --model "$model" --batch_size 64 --device "$dev" \
        --epochs_table "$OUT/epochs-$dev-$model-$r.csv" >"$OUT/worker$r-$dev-$model.out" 2>&1 &
    workers+=($!)
  done
  for p in "${workers[@]}"; do wait "$p" || failed=1; done
  kill "${servers[@]}" 2>/dev/null; wait "${servers[@]}" 2>/dev/null
  echo "=== $model on $dev ($epochs epochs), rank 0's table"
  cat "$OUT/epochs-$dev-$model-0.csv"
}
train gpu cnn "$GPU_EPOCHS" "$PORT_BASE"
train cpu cnn "$CPU_EPOCHS" $((PORT_BASE + 100))
train gpu mlp "$GPU_EPOCHS" $((PORT_BASE + 200))
train cpu mlp "$GPU_EPOCHS" $((PORT_BASE + 300))
exit $failed
