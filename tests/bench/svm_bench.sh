#!/usr/bin/env bash
# Linear SVM benchmark: starling-svm (dual coordinate descent, with and
# without sample elimination; 1 worker in one process, and W workers
# through real starling-node daemons on 127.0.0.1) against LIBLINEAR's
# liblinear-train -s 3 (L1 loss) / -s 1 (L2 loss) + liblinear-predict on the
# same data (starling-svm --write_libsvm), the same C, bias and eps.
# One row per (task, loss, solver): test accuracy, time, passes (LIBLINEAR:
# #iter, summed over the one-vs-rest classes), samples touched (coordinate
# visits; LIBLINEAR does not report them). Writes a markdown table on
# stdout and a CSV.
#
#   tests/bench/svm_bench.sh                      # the table in SVM.md
#   tests/bench/svm_bench.sh --tasks sandal_sneaker --losses l1 --workers 0
#
# Options: --tasks "tshirt_shirt sandal_sneaker ovr" --losses "l1 l2"
# --C 0.1 --eps 0.1 --bias 1 --train_limit N (pairs; 0 = all 12000)
# --ovr_train_limit N (default 10000; 0 = all 60000) --test_limit N (0 = all)
# --workers W (daemon-backed run with 2 daemons x W/2 workers; 0: skip)
# --out CSV (default tests/bench/results/svm_<date>.csv)
# --bin DIR (holding starling-svm, starling-coordinator, starling-node;
# default: bazel build -c opt). Every process it starts is stopped by pid on
# exit; no pkill.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
TASKS="tshirt_shirt sandal_sneaker ovr" LOSSES="l1 l2" C=0.1 EPS=0.1 BIAS=1
TRAIN_LIMIT=0 OVR_TRAIN_LIMIT=10000 TEST_LIMIT=0 WORKERS=4 BIN=""
OUT=$REPO/tests/bench/results/svm_$(date +%Y%m%d_%H%M%S).csv

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --tasks) TASKS=$2; shift 2 ;;
    --losses) LOSSES=$2; shift 2 ;;
    --C) C=$2; shift 2 ;;
    --eps) EPS=$2; shift 2 ;;
    --bias) BIAS=$2; shift 2 ;;
    --train_limit) TRAIN_LIMIT=$2; shift 2 ;;
    --ovr_train_limit) OVR_TRAIN_LIMIT=$2; shift 2 ;;
    --test_limit) TEST_LIMIT=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    *) echo "svm_bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ $WORKERS -ne 0 && ( $WORKERS -lt 2 || $((WORKERS % 2)) -ne 0 ) ]]; then
  echo "svm_bench.sh: --workers must be 0 or an even number >= 2" >&2; exit 2
fi
for tool in liblinear-train liblinear-predict; do
  command -v $tool >/dev/null || {
    echo "svm_bench.sh: $tool not found: apt-get install liblinear-tools" >&2
    exit 1
  }
done

WORK=$(mktemp -d /tmp/svm-bench-XXXXXX)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

if [[ -z $BIN ]]; then
  (cd "$REPO" && bazel build -c opt --color=no --curses=no \
    //worker/svm:starling-svm //server/coordinator:starling-coordinator \
    //server/node:starling-node >&2)
  OPT_BIN=$(cd "$REPO" && bazel info -c opt bazel-bin 2>/dev/null)
  BIN=$WORK/bin
  mkdir -p "$BIN"
  cp "$OPT_BIN/worker/svm/starling-svm" \
    "$OPT_BIN/server/coordinator/starling-coordinator" \
    "$OPT_BIN/server/node/starling-node" "$BIN/"
fi
SVM=$BIN/starling-svm

# key=value from starling-svm's summary line.
field() { sed -n "s/.*starling-svm: done.* $2=\([^ ]*\).*/\1/p" "$1" | head -1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

mkdir -p "$(dirname "$OUT")"
echo "task,loss,solver,workers,elimination,train,test,accuracy,passes,touched,solve_s,wall_s,dual_objective,converged" >"$OUT"
row() { echo "$1" >>"$OUT"; }

# starling-svm --local: one worker, plain DCD.
run_local() {  # task loss elim limit
  local log=$WORK/local.log t0 t1
  t0=$(now)
  "$SVM" --local --task="$1" --loss="$2" --elimination="$3" --C="$C" \
    --eps="$EPS" --bias="$BIAS" --train_limit="$4" --test_limit="$TEST_LIMIT" \
    --progress_every=0 >"$log"
  t1=$(now)
  row "$1,$2,starling-svm,1,$3,$(field "$log" train),$(field "$log" test),$(field "$log" accuracy),$(field "$log" passes),$(field "$log" touched),$(field "$log" solve_s),$(elapsed "$t0" "$t1"),$(field "$log" dual),$(field "$log" converged)"
}

# A coordinator (--optimizer none) + 2 daemons + W starling-svm workers on
# loopback, fresh for each run; worker 0's summary is the row.
PORT=$((30000 + ($$ % 1000) * 20))
run_cluster() {  # task loss elim limit
  local per=$((WORKERS / 2)) d i t0 t1 cpid dpids=() wpids=() status=0
  PORT=$((PORT + 10))
  local coord=127.0.0.1:$PORT
  "$BIN/starling-coordinator" --job_id=svm --expected_nodes=2 \
    --parameter_count=0 --listen="$coord" --metrics_port=0 \
    --mode=sync_sgd --optimizer=none --learning_rate=0.1 \
    --collective_timeout=60s --heartbeat_timeout=60s --log_level=warning 2>"$WORK/coordinator.err" &
  cpid=$!
  PIDS+=("$cpid")
  for d in 0 1; do
    "$BIN/starling-node" --coordinator="$coord" --job_id=svm \
      --hostname="node$d" --data_port=$((PORT + 1 + d)) \
      --admin_port=$((PORT + 3 + d)) --metrics_port=$((PORT + 5 + d)) \
      --worker_socket="$WORK/node$d.sock" --local_workers=$per \
      --log_level=warning 2>"$WORK/node$d.err" &
    dpids+=($!)
    PIDS+=($!)
  done
  t0=$(now)
  for d in 0 1; do
    for ((i = 0; i < per; i++)); do
      "$SVM" --socket="$WORK/node$d.sock" --worker_index=$i --task="$1" \
        --loss="$2" --elimination="$3" --C="$C" --eps="$EPS" --bias="$BIAS" \
        --train_limit="$4" --test_limit="$TEST_LIMIT" --progress_every=0 \
        --timeout=120s >"$WORK/w$d.$i.log" 2>"$WORK/w$d.$i.err" &
      wpids+=($!)
      PIDS+=($!)
    done
  done
  for pid in "${wpids[@]}"; do wait "$pid" || status=1; done
  t1=$(now)
  for pid in "$cpid" "${dpids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "$cpid" "${dpids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $status -ne 0 ]]; then
    echo "svm_bench.sh: a cluster worker failed ($1 $2 $3):" >&2
    cat "$WORK"/w*.err "$WORK"/node*.err "$WORK/coordinator.err" >&2
    row "$1,$2,starling-svm (daemons),$WORKERS,$3,failed,,,,,,,,"
    return 0
  fi
  local log=$WORK/w0.0.log
  row "$1,$2,starling-svm (daemons),$WORKERS,$3,$(field "$log" train),$(field "$log" test),$(field "$log" accuracy),$(field "$log" passes),$(field "$log" touched),$(field "$log" solve_s),$(elapsed "$t0" "$t1"),$(field "$log" dual),$(field "$log" converged)"
}

run_liblinear() {  # task loss limit
  local s=3 t0 t1 train_log=$WORK/ll_train.log
  [[ $2 == l2 ]] && s=1
  "$SVM" --write_libsvm="$WORK" --task="$1" --train_limit="$3" \
    --test_limit="$TEST_LIMIT" >/dev/null
  local bias_flag=() n_train n_test
  [[ $(awk -v b="$BIAS" 'BEGIN { print (b > 0) }') == 1 ]] && bias_flag=(-B "$BIAS")
  t0=$(now)
  liblinear-train -s $s -c "$C" -e "$EPS" "${bias_flag[@]}" "$WORK/train.svm" \
    "$WORK/model" >"$train_log"
  t1=$(now)
  liblinear-predict "$WORK/test.svm" "$WORK/model" "$WORK/pred" \
    >"$WORK/ll_predict.log"
  local acc iters objective
  acc=$(sed -n 's/^Accuracy = \([0-9.]*\)%.*/\1/p' "$WORK/ll_predict.log")
  acc=$(awk -v a="$acc" 'BEGIN { printf "%.4f", a / 100 }')
  iters=$(sed -n 's/.*#iter = \([0-9]*\).*/\1/p' "$train_log" |
    awk '{ s += $1 } END { print s }')
  objective=$(sed -n 's/^Objective value = \(.*\)/\1/p' "$train_log" |
    awk '{ s += $1 } END { printf "%.6g", s }')
  n_train=$(wc -l <"$WORK/train.svm")
  n_test=$(wc -l <"$WORK/test.svm")
  local converged=1
  grep -q "reaching max number of iterations" "$train_log" && converged=0
  row "$1,$2,liblinear-train -s $s,1,on,$n_train,$n_test,$acc,$iters,,,$(elapsed "$t0" "$t1"),$objective,$converged"
}

for task in $TASKS; do
  limit=$TRAIN_LIMIT
  [[ $task == ovr ]] && limit=$OVR_TRAIN_LIMIT
  for loss in $LOSSES; do
    echo "svm_bench.sh: $task $loss" >&2
    run_liblinear "$task" "$loss" "$limit"
    for elim in on off; do
      run_local "$task" "$loss" "$elim" "$limit"
      if [[ $WORKERS -ne 0 ]]; then
        run_cluster "$task" "$loss" "$elim" "$limit"
      fi
    done
  done
done

# The markdown table: accuracy vs LIBLINEAR's and visits vs no elimination.
awk -F, 'NR == 1 { next }
  { key = $1 "," $2; rows[NR] = $0 }
  $3 ~ /^liblinear/ { ll[key] = $8 }
  $3 !~ /^liblinear/ && $5 == "off" { off[key "," $3] = $10 }
  END {
    print "| task | loss | solver | W | elim. | train / test | accuracy | vs LIBLINEAR (pt) | passes | samples touched | vs elim. off | solve s | wall s | dual obj. | met eps |"
    print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for (i = 2; i <= NR; i++) {
      split(rows[i], f, ",")
      k = f[1] "," f[2]
      d = (f[3] ~ /^liblinear/) ? "" : sprintf("%+.2f", 100 * (f[8] - ll[k]))
      v = ""
      if (f[3] !~ /^liblinear/ && f[5] == "on" && off[k "," f[3]] > 0)
        v = sprintf("%.0f%% fewer", 100 * (1 - f[10] / off[k "," f[3]]))
      if (f[6] == "failed") { printf "| %s | %s | %s | %s | %s | failed | | | | | | | | | |\n", f[1], f[2], f[3], f[4], f[5]; continue }
      printf "| %s | %s | %s | %s | %s | %s / %s | %.2f%% | %s | %s | %s | %s | %s | %s | %s | %s |\n",
        f[1], f[2], f[3], f[4], (f[3] ~ /^liblinear/) ? "shrinking" : f[5],
        f[6], f[7], 100 * f[8], d, f[9], (f[10] == "") ? "n/a" : f[10], v,
        (f[11] == "") ? "n/a" : f[11], f[12], f[13], (f[14] == 1) ? "yes" : "no (max passes)"
    }
  }' "$OUT"
echo
echo "CSV: $OUT"
