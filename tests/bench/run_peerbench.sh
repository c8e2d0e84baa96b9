#!/usr/bin/env bash
# Runs starling-bench in the simulated cluster of ../shared/peerbench (network
# namespaces, one rate-limited NIC per host), beside Gloo and Open MPI in the
# same run, so the figures compare as ratios. Needs root (ip netns, tc).
#
#   tests/bench/run_peerbench.sh                       # N=4, 1gbit, 1e3..1e8, all peers
#   tests/bench/run_peerbench.sh --ns "8" --big-ns "8" --out tests/bench/results/n8.csv
#   tests/bench/run_peerbench.sh --peers starling --sizes "1e6 1e7"
#   tests/bench/run_peerbench.sh --repeat 3 --ns "4 8" --big-ns "4 8"
#   tests/bench/run_peerbench.sh --peers starling,starling-fabric   # TCP vs fabric
#
# Peer starling-fabric is starling-bench with --transport fabric over
# libfabric's tcp provider (STARLING_FABRIC_PROVIDER to change it): the
# fabric path's own cost on the same link as Starling's TCP transport.
#
# --repeat K runs the whole of it K times (each run measures every peer in
# turn, so the runs interleave them) and combines the runs with
# peerbench_repeats.py: each configuration's median of the runs' medians,
# with their range and spread, and a table that calls Starling ahead of or
# behind the best peer only where the ranges do not overlap.
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
ALGOS=${STARLING_ALGOS:-auto,butterfly,ring,tree,reduce_bcast}
REPEAT=1

[[ -d $PEERBENCH_SRC ]] || { echo "run_peerbench.sh: no peerbench at $PEERBENCH_SRC (set PEERBENCH_SRC)" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run_peerbench.sh: needs root for ip netns and tc" >&2; exit 2; }

OUT=$REPO/tests/bench/results/peerbench_$(date +%Y%m%d_%H%M%S).csv
ARGS=(--ns 4 --big-ns 4 --rate 1gbit --sizes "1e3 1e5 1e6 1e7 1e8" --peers gloo,mpi,starling)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT=$(realpath -m "$2"); shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    -h|--help) sed -n 2,26p "$0"; exit 0 ;;
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
FABRIC_TEMPLATE="$TEMPLATE --transport fabric --fabric_provider ${STARLING_FABRIC_PROVIDER:-tcp}"
ARGS+=(--peer starling-fabric "$FABRIC_TEMPLATE")
cd "$WORK"
if [[ $REPEAT -le 1 ]]; then
  ./run.sh "${ARGS[@]}" --peer starling "$TEMPLATE" --out "$OUT"
else
  RUNS=()
  for ((k = 1; k <= REPEAT; k++)); do
    echo "== run $k of $REPEAT"
    ./run.sh "${ARGS[@]}" --peer starling "$TEMPLATE" --out "${OUT%.csv}.run$k.csv"
    RUNS+=("${OUT%.csv}.run$k.csv")
  done
  echo
  echo "== $REPEAT runs combined (median of the runs' medians, their range)"
  /usr/bin/python3 "$REPO/tests/bench/peerbench_repeats.py" "$OUT" "${RUNS[@]}"
fi
echo
python3 summarize.py "$OUT"
echo
echo "starling rows:"
grep -E '^(peer|starling),' "$OUT" | column -t -s, 2>/dev/null || grep -E '^(peer|starling),' "$OUT"
