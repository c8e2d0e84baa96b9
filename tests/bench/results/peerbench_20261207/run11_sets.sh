#!/bin/bash
# RESULTS.md run 11: more interleaved sets of the butterfly and the ring at
# the sizes where the butterfly's target is measured, on `cluster.sh up N
# 1gbit`, each with the slowest rank's time of every iteration.
#   run11_sets.sh N SETS SIZES BIN
#   run11_sets.sh 8 5 1e6,1e7 bazel-bin/server/bench/starling-bench
set -u
N=$1; SETS=$2; SIZES=$3; BIN=$4
RUN=$(cd "$(dirname "$0")/../peerbench_20261202" && pwd)/run_ranks.sh
for ((s = 1; s <= SETS; s++)); do
  echo "=== set $s"
  "$RUN" "$N" "$BIN" 31000 --sizes "$SIZES" --algo butterfly,ring \
    --print_iterations 2>&1 | grep -E "^ +[0-9]|^# (butterfly|ring)"
done
