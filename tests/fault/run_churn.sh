#!/usr/bin/env bash
# The churn run: a job of 4 daemons on loopback trains runs of 200 steps back
# to back while a random daemon is killed (-9) every 30 s and started again
# 5 s later with the same flags (what systemd's Restart=on-failure does), for
# MINUTES (default 10), after a fault-free baseline of one minute. Counts
# runs finished and failed, hangs, and the step rate against the baseline;
# writes tests/fault/CHURN.md.
#
#   tests/fault/run_churn.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:-10}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
bazel test --config=ci //tests/fault:fault_table --test_output=streamed \
  --test_timeout=$((minutes * 60 + 600)) --test_arg=--churn="${minutes}m" \
  --test_arg=--churn_every=30s --test_arg=--out="$out" --cache_test_results=no
{
  echo "# The churn run"
  echo
  echo "Made by \`tests/fault/run_churn.sh $minutes\` on $(date -u +%Y-%m-%d)" \
    "($(nproc) cores, $(uname -m)); 4 daemons on loopback, 1 worker each,"
  echo "runs of 200 steps back to back (each on the daemons serving when it"
  echo "begins), momentum, heartbeat timeout 2 s (heartbeats every 250 ms),"
  echo "--rejoin_grace 0, buddy replicas (--replicas 1). A run in progress when"
  echo "a daemon is killed goes on with the others (their workers rejoin; the"
  echo "killed daemon's worker ends with it); it counts as finished when every"
  echo "other worker finished. The restarted daemon is taken back between runs."
  echo "Rolled back and acknowledged updates lost: from the workers' rejoin"
  echo "lines (fault table). The step rate counts the steps of finished runs"
  echo "per second of wall time."
  echo
  cat "$out"
} > tests/fault/CHURN.md
cat tests/fault/CHURN.md
