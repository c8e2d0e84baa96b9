#!/usr/bin/env bash
# Bazel sh_test wrapper: runs torch_backend_test.py under Debian's
# /usr/bin/python3 (the one with python3-torch); arguments select the test
# class.
set -euo pipefail
exec /usr/bin/python3 "$TEST_SRCDIR/starling/client/python/tests/torch_backend_test.py" "$@"
