#!/bin/bash
# starling-run: finds its Bazel runfiles tree and runs the launcher
# (starling_run.py) under Debian's Python with it.
set -euo pipefail

# The runfiles directory of workspace "starling", tried in this order:
#   1. <this script>.runfiles/starling: bazel-bin/client/python/starling-run;
#   2. the tree this script sits in, when it was reached through another
#      target's runfiles (a test's data: .../X.runfiles/starling/client/...);
#   3. $RUNFILES_DIR/starling, $TEST_SRCDIR/starling (bazel run, bazel test);
#   4. the same checks on each symlink target along the way, for a symlink
#      to the script put on $PATH.
find_runfiles() {
  local path="$1" hops=0 target
  while :; do
    if [[ -d "${path}.runfiles/starling" ]]; then
      echo "${path}.runfiles/starling"
      return 0
    fi
    if [[ "${path}" == *.runfiles/starling/* ]]; then
      echo "${path%%.runfiles/starling/*}.runfiles/starling"
      return 0
    fi
    if [[ "${hops}" -eq 0 ]]; then
      for root in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}"; do
        if [[ -n "${root}" && -f "${root}/starling/client/python/starling_run.py" ]]; then
          echo "${root}/starling"
          return 0
        fi
      done
    fi
    [[ -L "${path}" && "${hops}" -lt 16 ]] || return 1
    target="$(readlink "${path}")"
    # A relative link is relative to the link's own directory.
    [[ "${target}" == /* ]] || target="$(dirname "${path}")/${target}"
    path="${target}"
    hops=$((hops + 1))
  done
}

if ! RUNFILES="$(find_runfiles "$0")"; then
  echo "starling-run: error: cannot find the runfiles of $0 (build it with" \
    "bazel build //client/python:starling-run and run bazel-bin's copy)" >&2
  exit 1
fi
# Absolute: the workers may change directory before importing starling.
RUNFILES="$(cd "${RUNFILES}" && pwd)"
exec /usr/bin/python3 "${RUNFILES}/client/python/starling_run.py" \
  --runfiles "${RUNFILES}" "$@"
