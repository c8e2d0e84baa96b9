#!/usr/bin/env bash
# Bazel sh_test wrapper: runs horovod_api_test.py under Debian's
# /usr/bin/python3 (the one with python3-torch).
set -euo pipefail
exec /usr/bin/python3 "$TEST_SRCDIR/starling/client/python/tests/horovod_api_test.py" "$@"
