#!/usr/bin/env bash
# Runs a daemon suite's test binary (the first argument, its runfiles path)
# with the other arguments. The _fabric and _shm targets of suites.bzl run
# the suite's one binary this way, their daemon flags in
# STARLING_TEST_DAEMON_FLAGS, so that each suite is compiled and linked once.
set -euo pipefail
binary="${TEST_SRCDIR:?run by bazel test}/${TEST_WORKSPACE:-starling}/${1:?the suite binary}"
shift
exec "$binary" "$@"
