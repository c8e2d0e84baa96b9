#!/bin/bash
# RESULTS.md run 10: interleaved sets on peerbench's cluster (`cluster.sh up
# N 1gbit`). Per set: the build before this stop's changes, the build with
# them (starling-bench's own iteration counts per size), then Open MPI
# (default, ring) and Gloo (ring_chunked) through peerbench's run.sh.
#   run10_sets.sh N SETS SIZES ALGOS "PEER_SIZES" OLD_BIN NEW_BIN PEERBENCH_DIR
#   run10_sets.sh 8 3 1e3,1e5,1e6,1e7 auto,butterfly "1e3 1e5 1e6 1e7" /tmp/sb_old /tmp/sb_new /tmp/pb
set -u
N=$1; SETS=$2; SIZES=$3; ALGOS=$4; PEER_SIZES=$5; OLD=$6; NEW=$7; PB=$8
RUN=$(cd "$(dirname "$0")/../peerbench_20261202" && pwd)/run_ranks.sh
for ((s = 1; s <= SETS; s++)); do
  for which in old new; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    echo "=== set $s $which"
    "$RUN" "$N" "$bin" 31000 --sizes "$SIZES" --algo "$ALGOS" 2>&1 |
      grep -E "^ +[0-9]"
  done
  echo "=== set $s peers"
  csv=$(mktemp)
  (cd "$PB" && ./run.sh --no-cluster --ns "$N" --big-ns "$N" --sizes "$PEER_SIZES" \
     --peers mpi,gloo --mpi-variants default,ring --gloo-algs ring_chunked \
     --out "$csv" > /dev/null 2>&1)
  tail -n +2 "$csv"
  rm -f "$csv"
done
