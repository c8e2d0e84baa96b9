#!/bin/bash
# Interleaved sets on peerbench's cluster (`cluster.sh up N 1gbit`): per set,
# the build before a change, the build with it, then Open MPI's default and
# ring all-reduce; prints starling-bench's rows and peerbench's CSV rows.
#   interleaved_sets.sh N SETS SIZES ALGOS ITERS "MPI_SIZES" OLD_BIN NEW_BIN PEERBENCH_DIR
#   interleaved_sets.sh 8 4 1e3,1e5,1e6 tree,butterfly,ring 100 "1e3 1e5" /tmp/sb_old /tmp/sb_new /tmp/pb
set -u
N=$1; SETS=$2; SIZES=$3; ALGOS=$4; ITERS=$5; MPI_SIZES=$6; OLD=$7; NEW=$8; PB=$9
HERE=$(cd "$(dirname "$0")" && pwd)
for ((s = 1; s <= SETS; s++)); do
  for which in old new; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    echo "=== set $s $which"
    "$HERE/run_ranks.sh" "$N" "$bin" 31000 --sizes "$SIZES" --algo "$ALGOS" \
      --iters "$ITERS" 2>&1 | grep -E "^ +[0-9]"
  done
  echo "=== set $s mpi"
  csv=$(mktemp)
  (cd "$PB" && ./run.sh --no-cluster --ns "$N" --sizes "$MPI_SIZES" --peers mpi \
     --mpi-variants default,ring --out "$csv" > /dev/null 2>&1)
  tail -n +2 "$csv"
  rm -f "$csv"
done
