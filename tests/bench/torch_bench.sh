#!/usr/bin/env bash
# Per-step overhead of the Python binding (starling.torch) against the C++
# reference worker, on the same MLP (784-256-128-10), batch, cluster shape and
# job: starling-run starts a coordinator and D daemons on 127.0.0.1 and W
# workers per daemon, synchronous SGD with momentum 0.9 applied by the
# daemons (--optimizer momentum). Per repetition it runs, back to back,
#   cpp: bazel-bin/worker/trainer/starling-worker --model mlp --batch_size B
#   py:  worker/examples/pytorch/train.py --model mlp --batch_size B --timing
# for E epochs of all 60000 samples; the first epoch is the warm-up, the
# figures are over epochs 2..E (235 steps per epoch with 4 workers):
#   step_ms     wall time per step: the epochs' training seconds (evaluation
#               excluded, as both workers time it) / steps
#   compute_ms  forward + backward per step, mean over the workers (cpp: the
#               epoch table's compute ratio x step_ms; py: train.py --timing)
#   comm_ms     step_ms - compute_ms: the wait for the daemons + the binding
#   py_step_median_ms / py_compute_median_ms: train.py's per-step medians
# then one summary row per shape (medians over the repetitions):
#   overhead = (py comm_ms - cpp comm_ms) / cpp step_ms   (target <= 10%)
#   ratio    = py step_ms / cpp step_ms
#
#   tests/bench/torch_bench.sh                        # the recorded table
#   tests/bench/torch_bench.sh --shapes "2x2 2x1" --reps 3 --epochs 3
#
# Pinning (--pin on, the default): worker rank r runs on core r % nproc
# (taskset); the coordinator and daemons float. Unpinned, the scheduler's
# placement of 4 workers and 2 daemons on 2 cores makes runs bimodal (steps
# of ~10 or ~17 ms for the same command), which drowns the binding.
#
# Options: --shapes "DxW ..." (daemons x workers per daemon; default "2x1 2x2")
# --pin on|off (on) --reps N (3) --epochs E (3, >= 2) --batch B (64) --lr LR (0.05)
# --out CSV (tests/bench/results/torch_overhead.csv) --bin DIR (an -c opt
# bazel-bin holding client/python/starling-run and worker/trainer/
# starling-worker; default: built here with --config=opt). Every process is
# bounded by `timeout` and started by starling-run, which stops its daemons.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SHAPES="2x1 2x2" PIN=on REPS=3 EPOCHS=3 BATCH=64 LR=0.05 BIN=""
OUT=$REPO/tests/bench/results/torch_overhead.csv
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) SHAPES=$2; shift 2 ;;
    --pin) PIN=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --lr) LR=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n 2,36p "$0"; exit 0 ;;
    *) echo "torch_bench.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
[[ $EPOCHS -ge 2 ]] || { echo "torch_bench.sh: --epochs must be >= 2 (epoch 1 is the warm-up)" >&2; exit 2; }
if [[ -z $BIN ]]; then
  echo "== building (--config=opt)"
  BUILD_LOG=$(mktemp /tmp/torch_bench_build.XXXXXX)
  # --symlink_prefix=/: leave the bazel-bin symlink (fastbuild) alone.
  (cd "$REPO" && bazel build --config=ci --config=opt --symlink_prefix=/ \
      //client/python:starling-run //worker/trainer:starling-worker >"$BUILD_LOG" 2>&1) ||
    { echo "torch_bench.sh: the build failed:" >&2; tail -20 "$BUILD_LOG" >&2; exit 1; }
  rm -f "$BUILD_LOG"
  BIN=$(cd "$REPO" && bazel info --config=ci --config=opt bazel-bin 2>/dev/null)
fi
RUN=$BIN/client/python/starling-run
WORKER=$BIN/worker/trainer/starling-worker
for f in "$RUN" "$WORKER"; do
  [[ -x $f ]] || { echo "torch_bench.sh: no $f" >&2; exit 2; }
done
PY=/usr/bin/python3
TRAIN=$REPO/worker/examples/pytorch/train.py
WORK=$(mktemp -d /tmp/torch_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
SAMPLES=60000
PARTITIONS=$(( (SAMPLES + BATCH - 1) / BATCH ))
NCPU=$(nproc)
# The workers' command prefix: sh -c 'exec $PREFIX CMD' (STARLING_RANK is
# set by starling-run for each worker).
# shellcheck disable=SC2016  # expanded by each worker's sh -c
if [[ $PIN == on ]]; then
  PREFIX='taskset -c $((STARLING_RANK % '$NCPU'))'
else
  PREFIX=''
fi

mkdir -p "$(dirname "$OUT")"
RAW=$WORK/raw.csv
echo "shape,pin,impl,rep,workers,batch,steps,step_ms,compute_ms,comm_ms,py_step_median_ms,py_compute_median_ms,py_optimizer_step_median_ms" > "$RAW"

# parse IMPL LOG SHAPE REP WORKERS: one row of $RAW from a run's output.
parse() {
  PIN=$PIN "$PY" - "$@" "$BATCH" "$EPOCHS" "$PARTITIONS" >> "$RAW" <<'EOF'
import csv, math, os, re, sys
impl, log, shape, rep, workers, batch, epochs, partitions = sys.argv[1:]
workers, batch, epochs = int(workers), int(batch), int(epochs)
text = open(log).read()
if impl == "cpp":
    rows = list(csv.DictReader(open(log + ".epochs.csv")))[1:]  # epoch 1: warm-up
    steps_per_epoch = math.ceil(int(partitions) / workers)
    seconds = [float(r["epoch_seconds"]) for r in rows]
    compute = sum(float(r["compute_ratio"]) * s for r, s in zip(rows, seconds))
    medians = ["", "", ""]
else:
    # [0]     2     0.3639    86.30%     4.52    13317.6
    table = re.findall(r"^\[0\]\s+(\d+)\s+[\d.]+\s+[\d.]+%\s+([\d.]+)\s+[\d.]+$", text, re.M)
    seconds = [float(s) for e, s in table if int(e) >= 2]
    steps_per_epoch = int(re.search(r"(\d+) steps/epoch", text).group(1))
    t = re.search(r"median step ([\d.]+) ms, compute ([\d.]+) ms, optimizer.step\(\) "
                  r"([\d.]+) ms; mean step ([\d.]+) ms, compute ([\d.]+) ms", text)
    medians = [t.group(1), t.group(2), t.group(3)]
    compute = float(t.group(5)) / 1000 * steps_per_epoch * len(seconds)
if len(seconds) != epochs - 1:
    sys.exit("torch_bench.sh: %s run %s: %d measured epochs in %s" % (impl, rep, len(seconds), log))
steps = steps_per_epoch * len(seconds)
step_ms = 1000 * sum(seconds) / steps
compute_ms = 1000 * compute / steps
print("%s,%s,%s,%s,%d,%d,%d,%.3f,%.3f,%.3f,%s,%s,%s" % (
    shape, os.environ["PIN"], impl, rep, workers, batch, steps, step_ms, compute_ms,
    step_ms - compute_ms, *medians))
EOF
}

for shape in $SHAPES; do
  D=${shape%x*} L=${shape#*x}
  N=$((D * L))
  JOB=(-np "$N" --nodes "$D" --optimizer momentum --learning_rate "$LR" --quiet)
  for ((rep = 1; rep <= REPS; rep++)); do
    log=$WORK/$shape.cpp.$rep
    echo "== $shape rep $rep: C++ starling-worker (pin $PIN)"
    # The table file name carries the rank: only rank 0 writes one.
    # shellcheck disable=SC2016  # $STARLING_* are the worker's, set by starling-run
    timeout 600 "$RUN" "${JOB[@]}" --epochs "$EPOCHS" --partitions_per_epoch "$PARTITIONS" \
      sh -c 'r=$STARLING_RANK; exec '"$PREFIX"' "$0" --socket "$STARLING_SOCKET" \
        --worker_index "$STARLING_WORKER_INDEX" --model mlp --batch_size "$1" \
        --progress_interval 1h --epochs_table "$2.$r"' \
      "$WORKER" "$BATCH" "$log.table" > "$log" 2>&1 ||
      { echo "torch_bench.sh: the C++ run failed:" >&2; tail -20 "$log" >&2; exit 1; }
    mv "$log.table.0" "$log.epochs.csv"
    grep '^\[0\] *[0-9]' "$log" || true
    parse cpp "$log" "$shape" "$rep" "$N"

    log=$WORK/$shape.py.$rep
    echo "== $shape rep $rep: Python train.py (pin $PIN)"
    # shellcheck disable=SC2016
    timeout 600 "$RUN" "${JOB[@]}" sh -c 'exec '"$PREFIX"' "$0" "$1" --model mlp \
      --batch_size "$2" --epochs "$3" --timing' "$PY" "$TRAIN" "$BATCH" "$EPOCHS" > "$log" 2>&1 ||
      { echo "torch_bench.sh: the Python run failed:" >&2; tail -20 "$log" >&2; exit 1; }
    grep '^\[0\] *[0-9]\|timing' "$log" || true
    parse py "$log" "$shape" "$rep" "$N"
  done
done

# The table (nccl-tests style) and the CSV: every run, then per shape the
# medians over the repetitions and the verdict figures.
"$PY" - "$RAW" "$OUT" <<'EOF'
import csv, statistics, sys
raw, out = sys.argv[1:]
rows = list(csv.DictReader(open(raw)))
fields = ["shape", "pin", "impl", "rep", "workers", "batch", "steps", "step_ms",
          "compute_ms", "comm_ms", "py_step_median_ms", "py_compute_median_ms",
          "py_optimizer_step_median_ms", "overhead_pct", "step_ratio"]
summary = []
for shape in sorted({r["shape"] for r in rows}, key=lambda s: [r["shape"] for r in rows].index(s)):
    mine = [r for r in rows if r["shape"] == shape]
    med = {}
    for impl in ("cpp", "py"):
        runs = [r for r in mine if r["impl"] == impl]
        m = dict(runs[0], rep="median")
        for k in fields[7:13]:
            vals = [float(r[k]) for r in runs if r.get(k)]
            m[k] = "%.3f" % statistics.median(vals) if vals else ""
        med[impl] = m
    # Per repetition (the two runs back to back), then the median.
    reps = sorted({r["rep"] for r in mine})
    over, ratio = [], []
    for rep in reps:
        c = next(r for r in mine if r["impl"] == "cpp" and r["rep"] == rep)
        p = next(r for r in mine if r["impl"] == "py" and r["rep"] == rep)
        over.append(100 * (float(p["comm_ms"]) - float(c["comm_ms"])) / float(c["step_ms"]))
        ratio.append(float(p["step_ms"]) / float(c["step_ms"]))
        p["overhead_pct"], p["step_ratio"] = "%.1f" % over[-1], "%.3f" % ratio[-1]
    med["py"]["overhead_pct"] = "%.1f" % statistics.median(over)
    med["py"]["step_ratio"] = "%.3f" % statistics.median(ratio)
    summary += [med["cpp"], med["py"]]
with open(out, "w") as f:
    w = csv.DictWriter(f, fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows + summary)
head = ("#  shape pin impl    rep workers batch steps   step_ms compute_ms  comm_ms"
        "  py_step_med py_comp_med py_opt_med  overhead  step_ratio")
print(head)
for r in rows + summary:
    print("  %5s %3s %-4s %6s %7s %5s %5s %9s %10s %8s %12s %11s %10s %9s %11s" % tuple(
        (r.get(k) or "-") + ("%" if k == "overhead_pct" and r.get(k) else "")
        for k in fields))
for m in summary[1::2]:
    print("# %s, pin %s: binding overhead %s%% of the C++ step (target <= 10%%): %s; "
          "step time ratio py/cpp %s" % (
              m["shape"], m["pin"], m["overhead_pct"],
              "met" if float(m["overhead_pct"]) <= 10 else "NOT met", m["step_ratio"]))
print("# CSV: %s" % out)
EOF
