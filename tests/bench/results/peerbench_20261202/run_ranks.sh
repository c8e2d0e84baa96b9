#!/bin/bash
# Starts one starling-bench rank per namespace of ../shared/peerbench's
# `cluster.sh up N RATE` (h0..h{N-1}, 10.77.0.1..), prints rank 0's table and
# waits for every rank; each rank is bounded by `timeout`.
#   run_ranks.sh N BINARY PORT [starling-bench flags...]
#   run_ranks.sh 8 bazel-bin/server/bench/starling-bench 31000 --sizes 1e3,1e5 --algo tree,ring --iters 100
set -u
N=$1; BIN=$2; PORT=$3; shift 3
HOSTS=$(for ((i = 0; i < N; i++)); do printf "10.77.0.%d," $((i + 1)); done)
HOSTS=${HOSTS%,}
pids=()
for ((i = 1; i < N; i++)); do
  timeout 300 ip netns exec h$i "$BIN" --rank $i --peers "$HOSTS" --port "$PORT" \
    --insecure --timeout-s 60 "$@" > /dev/null 2>&1 < /dev/null &
  pids+=($!)
done
timeout 300 ip netns exec h0 "$BIN" --rank 0 --peers "$HOSTS" --port "$PORT" \
  --insecure --timeout-s 60 "$@" < /dev/null
rc=$?
for p in "${pids[@]}"; do wait "$p"; done
exit $rc
