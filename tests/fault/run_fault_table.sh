#!/usr/bin/env bash
# Runs the fault table (tests/fault/fault_table.cc) and writes it to
# tests/fault/FAULT_TABLE.md. Each fault runs RUNS times (default 5) in a
# fresh job on loopback; the whole takes about RUNS x 40 s.
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
  echo "Times in seconds from the fault. *detect*: the coordinator acted on it"
  echo "(a new group epoch; for the coordinator, serving the group again)."
  echo "*resume*: a step committed again (the next run's first step at N-1,"
  echo "or the run that went on). *steps lost*: steps of the run in progress"
  echo "that failed with its group (no replica of shard and optimizer state"
  echo "yet: the next run starts over)."
  echo
  cat "$out"
} > tests/fault/FAULT_TABLE.md
cat tests/fault/FAULT_TABLE.md
