#!/usr/bin/env bash
# README command (a): builds everything (optimised) and runs the largest real
# thing Starling has today: a 4-rank all-reduce over the real TCP transport on
# loopback, every algorithm, every result checked against the fp64 reference.
#
#   deploy/demo.sh             4 ranks, 1e3..1e7 floats
#   RANKS=8 deploy/demo.sh     another group size
set -euo pipefail
cd "$(dirname "$0")/.."
RANKS=${RANKS:-4}
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

echo "=== building everything (bazel build --config=opt //...) ==="
bazel build --config=opt --config=ci //...
BIN=$(bazel info --config=opt bazel-bin 2>/dev/null)

echo
echo "=== all-reduce: ${RANKS} ranks (processes) on 127.0.0.1, TCP, float32 sum ==="
echo "    every algorithm; --check compares every element with the fp64 reference"
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e5,1e6,1e7 --algo all --check

echo
echo "=== the same group, bfloat16 average, automatic algorithm choice ==="
"$BIN/server/bench/starling-bench" --local "$RANKS" --port 29700 \
  --sizes 1e3,1e6 --dtype bfloat16 --reduce average --check

echo
echo "=== GPU path: CUDA device query ==="
"$BIN/worker/gpu/starling-device-query"

echo
echo "Loopback shares this machine's cores between all ranks, so these are"
echo "software figures; tests/bench/RESULTS.md has the rate-limited cluster runs."
