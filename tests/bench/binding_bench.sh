#!/usr/bin/env bash
# The Python binding's cost per step, with compute taken out: the C++
# sync_step_worker and its Python twin (sync_step_worker.py, through
# starling.torch's DistributedOptimizer) run the same job back to back under
# starling-run: synchronous SGD applied by the daemons (--optimizer sgd) on
# DIM float32 parameters (default 235,146: the MLP's), each step one
# gradient pass (x - t_w) then push + pull. Both print the median step time
# over the timed steps and the hash of the final parameters, which must be
# equal (the binding moves the same bytes). Per repetition, from the
# workers' mean median step and gradient-pass times:
#   overhead       = py step / cpp step - 1                 (target <= 10%)
#   comm_overhead  = ((py step - py grad) - (cpp step - cpp grad)) / cpp step
# (the second leaves out the gradient pass, torch's being the faster); the
# summary gives the medians over repetitions.
#
#   tests/bench/binding_bench.sh                       # the recorded table
#   tests/bench/binding_bench.sh --shapes "2x1" --reps 3 --steps 300
#
# Options: --shapes "DxW ..." (daemons x workers per daemon; "1x1 2x1 2x2")
# --reps N (7) --dim N (235146) --warmup N (20) --steps N (500)
# --out CSV (tests/bench/results/binding_overhead.csv) --bin DIR (an -c opt
# bazel-bin; default: built here with --config=opt, leaving bazel-bin alone).
# Workers are pinned (worker r on core r % nproc); starling-run stops every
# process it started.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
SHAPES="1x1 2x1 2x2" REPS=7 DIM=235146 WARMUP=20 STEPS=500 BIN=""
OUT=$REPO/tests/bench/results/binding_overhead.csv
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) SHAPES=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --dim) DIM=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    *) echo "binding_bench.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
if [[ -z $BIN ]]; then
  echo "== building (--config=opt)"
  (cd "$REPO" && bazel build --config=ci --config=opt --symlink_prefix=/ \
      //client/python:starling-run //tests/bench:sync_step_worker >/dev/null 2>&1) ||
    { echo "binding_bench.sh: the build failed (run it without >/dev/null)" >&2; exit 1; }
  BIN=$(cd "$REPO" && bazel info --config=ci --config=opt bazel-bin 2>/dev/null)
fi
RUN=$BIN/client/python/starling-run
CPP=$BIN/tests/bench/sync_step_worker
PY=$REPO/tests/bench/sync_step_worker.py
NCPU=$(nproc)
WORK=$(mktemp -d /tmp/binding_bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$(dirname "$OUT")"
echo "shape,rep,cpp_step_ms,py_step_ms,cpp_grad_ms,py_grad_ms,ratio,overhead_pct,comm_overhead_pct,params_fnv" > "$OUT"

# run IMPL D W LOG: one job; the workers' lines in LOG.
run() {
  local impl=$1 d=$2 w=$3 log=$4 cmd
  # shellcheck disable=SC2016  # expanded by each worker's sh -c
  if [[ $impl == cpp ]]; then
    cmd='exec taskset -c $((STARLING_RANK % '$NCPU')) '$CPP' --worker_socket $STARLING_SOCKET --worker_index $STARLING_WORKER_INDEX --dim '$DIM' --warmup '$WARMUP' --steps '$STEPS
  else
    cmd='exec taskset -c $((STARLING_RANK % '$NCPU')) /usr/bin/python3 '$PY' --dim '$DIM' --warmup '$WARMUP' --steps '$STEPS
  fi
  timeout 600 "$RUN" -np $((d * w)) --nodes "$d" --quiet --mode sync_sgd \
    --optimizer sgd --learning_rate 0.1 --parameter_count "$DIM" /bin/sh -c "$cmd" > "$log" 2>&1 ||
    { echo "binding_bench.sh: the $impl run failed:" >&2; tail -20 "$log" >&2; exit 1; }
}

printf '%6s %4s %12s %12s %11s %11s %7s %9s %9s  %s\n' shape rep cpp_step_ms py_step_ms \
  cpp_grad_ms py_grad_ms ratio overhead comm_ovh params_fnv
for shape in $SHAPES; do
  d=${shape%x*} w=${shape#*x}
  for ((rep = 1; rep <= REPS; rep++)); do
    run cpp "$d" "$w" "$WORK/cpp.log"
    run py "$d" "$w" "$WORK/py.log"
    /usr/bin/python3 - "$shape" "$rep" "$WORK/cpp.log" "$WORK/py.log" "$OUT" <<'PYEOF'
import re, statistics, sys
shape, rep, cpp_log, py_log, out = sys.argv[1:]
def read(path):
    rows = re.findall(r"step_ms=([\d.]+).*?grad_ms=([\d.]+) params_fnv=(\w+)", open(path).read())
    if not rows:
        sys.exit("binding_bench.sh: no result in " + path)
    return (statistics.mean(float(r[0]) for r in rows),
            statistics.mean(float(r[1]) for r in rows), {r[2] for r in rows})
c_step, c_grad, c_hash = read(cpp_log)
p_step, p_grad, p_hash = read(py_log)
if len(c_hash | p_hash) != 1:
    sys.exit("binding_bench.sh: final parameters differ: cpp %s, py %s" % (c_hash, p_hash))
ratio = p_step / c_step
comm = 100 * ((p_step - p_grad) - (c_step - c_grad)) / c_step
row = (shape, rep, c_step, p_step, c_grad, p_grad, ratio, 100 * (ratio - 1), comm,
       c_hash.pop())
open(out, "a").write("%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%s\n" % row)
print("%6s %4s %12.3f %12.3f %11.3f %11.3f %7.3f %8.1f%% %8.1f%%  %s" % row)
PYEOF
  done
done
/usr/bin/python3 - "$OUT" <<'PYEOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for shape in dict.fromkeys(r["shape"] for r in rows):
    mine = [r for r in rows if r["shape"] == shape]
    med = lambda k: statistics.median(float(r[k]) for r in mine)
    worst = max(med("overhead_pct"), med("comm_overhead_pct"))
    print("# %s: median over %d reps: cpp %.3f ms, py %.3f ms per step; overhead %.1f%%, "
          "without the gradient pass %.1f%% (target <= 10%%: %s); final parameters "
          "bit-identical" % (
              shape, len(mine), med("cpp_step_ms"), med("py_step_ms"), med("overhead_pct"),
              med("comm_overhead_pct"), "met" if worst <= 10 else "NOT met"))
print("# CSV: " + sys.argv[1])
PYEOF
