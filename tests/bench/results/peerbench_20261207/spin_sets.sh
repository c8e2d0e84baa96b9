#!/bin/bash
# Interleaved sets on peerbench's cluster (`cluster.sh up N 1gbit`): per set,
# one starling-bench run per I/O-loop spin, then Open MPI's default; prints
# starling-bench's rows (prefixed with the spin) and peerbench's CSV rows.
#   spin_sets.sh N SETS SIZES ALGOS ITERS "SPINS_US" "MPI_SIZES" BIN PEERBENCH_DIR [flags...]
#   spin_sets.sh 4 3 1e3 tree,butterfly 200 "0 100 200 500" "1e3" bazel-bin/server/bench/starling-bench /tmp/pb
set -u
N=$1; SETS=$2; SIZES=$3; ALGOS=$4; ITERS=$5; SPINS=$6; MPI_SIZES=$7; BIN=$8; PB=$9
shift 9
RUN=$(cd "$(dirname "$0")/../peerbench_20261202" && pwd)/run_ranks.sh
for ((s = 1; s <= SETS; s++)); do
  for spin in $SPINS; do
    echo "=== set $s loop_spin_us $spin"
    "$RUN" "$N" "$BIN" 31000 --sizes "$SIZES" --algo "$ALGOS" --iters "$ITERS" \
      --loop_spin_us "$spin" "$@" 2>&1 | grep -E "^ +[0-9]" | sed "s/^/spin=$spin /"
  done
  if [ -n "$MPI_SIZES" ]; then
    echo "=== set $s mpi"
    csv=$(mktemp)
    (cd "$PB" && ./run.sh --no-cluster --ns "$N" --sizes "$MPI_SIZES" --peers mpi \
       --mpi-variants default --out "$csv" > /dev/null 2>&1)
    tail -n +2 "$csv"
    rm -f "$csv"
  fi
done
