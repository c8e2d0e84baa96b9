#!/bin/bash
# Runs peerbench_repeats_test.py (unittest) under Debian's Python.
set -euo pipefail
exec /usr/bin/python3 "${TEST_SRCDIR}/starling/tests/bench/peerbench_repeats_test.py"
