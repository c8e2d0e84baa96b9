#!/bin/bash
# Runs starling_run_test.py (unittest) under Debian's Python.
set -euo pipefail
exec /usr/bin/python3 "${TEST_SRCDIR}/starling/client/python/starling_run_test.py"
