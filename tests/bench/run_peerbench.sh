#!/usr/bin/env bash
# Runs starling-bench in the simulated cluster of ../shared/peerbench (network
# namespaces, one rate-limited NIC per host), beside Gloo and Open MPI in the
# same run, so the figures compare as ratios. Needs root (ip netns, tc).
#
#   tests/bench/run_peerbench.sh                       # N=4, 1gbit, 1e3..1e8, all peers
#   tests/bench/run_peerbench.sh --ns "8" --big-ns "8" --out tests/bench/results/n8.csv
#   tests/bench/run_peerbench.sh --peers starling --sizes "1e6 1e7"
#
# Every other option goes to peerbench's run.sh (--rate, --sizes, --ns,
# --big-ns, --peers, --max-seconds, --iters-scale). peerbench lives in the
# read-only shared/ folder, so it is copied to a scratch directory first.
# The CSV lands in tests/bench/results/ (default name by date); the summary
# table (peerbench's summarize.py) is printed at the end.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PEERBENCH_SRC=${PEERBENCH_SRC:-$REPO/../shared/peerbench}
WORK=${PEERBENCH_WORK:-/tmp/starling-peerbench}
ALGOS=${STARLING_ALGOS:-butterfly,ring,tree,reduce_bcast}

[[ -d $PEERBENCH_SRC ]] || { echo "run_peerbench.sh: no peerbench at $PEERBENCH_SRC (set PEERBENCH_SRC)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run_peerbench.sh: needs root for ip netns and tc" >&2; exit 2; }

OUT=$REPO/tests/bench/results/peerbench_$(date +%Y%m%d_%H%M%S).csv
ARGS=(--ns 4 --big-ns 4 --rate 1gbit --sizes "1e3 1e5 1e6 1e7 1e8" --peers gloo,mpi,starling)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) ARGS+=("$1" "$2"); shift 2 ;;
  esac
done

"$REPO/deploy/setup.sh" --bench
echo "== building starling-bench (optimised)"
(cd "$REPO" && bazel build --config=opt --config=ci //server/bench:starling-bench)
mkdir -p "$(dirname "$OUT")"
rm -rf "$WORK" && cp -r "$PEERBENCH_SRC" "$WORK" && chmod -R u+w "$WORK"
(cd "$WORK" && ./build.sh >/dev/null)
install -m 755 "$REPO/bazel-bin/server/bench/starling-bench" "$WORK/starling-bench"
(cd "$REPO" && bazel shutdown >/dev/null 2>&1 || true)

TEMPLATE="$WORK/starling-bench --rank {RANK} --world {WORLD} --peers {HOSTS} --port {PORT} --sizes {SIZE} --warmup {WARMUP} --iters {ITERS} --max-seconds {MAXSEC} --algo $ALGOS --check --peerbench --timeout-s 120 --insecure"
cd "$WORK"
./run.sh "${ARGS[@]}" --peer starling "$TEMPLATE" --out "$OUT"
echo
python3 summarize.py "$OUT"
echo
echo "starling rows:"
grep -E '^(peer|starling),' "$OUT" | column -t -s, 2>/dev/null || grep -E '^(peer|starling),' "$OUT"
