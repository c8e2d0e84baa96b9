#!/bin/sh
# Stand-in for Bazel's remote coverage tools (see ../README.md).
echo "coverage is not available in Starling's offline Bazel build" >&2
exit 1
