#!/usr/bin/env bash
# Runs the fault table (tests/fault/fault_table.cc) and writes it to
# tests/fault/FAULT_TABLE.md. Each fault runs RUNS times (default 5) in a
# fresh job on loopback; the whole takes about RUNS x 50 s.
#
#   tests/fault/run_fault_table.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bazel test --config=ci //tests/fault:fault_table --test_output=streamed \
  --test_timeout=3600 --test_arg=--runs="$runs" --test_arg=--out="$out" \
  --cache_test_results=no
{
  echo "# The fault table"
  echo
  echo "Made by \`tests/fault/run_fault_table.sh $runs\` on $(date -u +%Y-%m-%d)" \
    "($(nproc) cores, $(uname -m)); jobs on loopback, 1 worker per daemon,"
  echo "heartbeat timeout 2 s (heartbeats every 250 ms), --rejoin_grace 0."
  echo "Workers: quadratic_worker, momentum, 400 steps of 1000 parameters,"
  echo "--rejoins 3; every optimizer but none keeps a buddy replica (--replicas 1)."
  echo "Times in seconds from the fault. *detect*: the coordinator acted on it"
  echo "(a new group epoch; for the coordinator, serving the group again)."
  echo "*resume*: a step committed again: in the run that went on (a survivor"
  echo "applied a step past the one it held once it served the new group; at"
  echo "most a step late), or the next run's first step where it could not."
  echo "*rolled back*: pushed steps the survivors' workers were told"
  echo "(Client::Rejoin) were rolled back: at most the step in flight."
  echo "*acknowledged updates lost*: steps whose push had returned to a worker"
  echo "but are not in the run that went on (from each worker's 'acknowledged"
  echo "through step A' and 'rejoined at step V'), summed over the runs; for a"
  echo "run that could not go on, every step it had applied (no durable"
  echo "checkpoint in that row). *bit-identical*: the survivors' workers end with the"
  echo "same parameters, bit for bit, and the run finished all its steps."
  echo
  cat "$out"
} > tests/fault/FAULT_TABLE.md
cat tests/fault/FAULT_TABLE.md
